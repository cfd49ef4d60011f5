// --fp16 and --bf16 through the binary. fp16: Megatron's dynamic loss scaler
// (megatron/core/optimizer/grad_scaler.py, lib/optim/loss_scaler.h) starts at
// 2^32, which overflows the fp16 gradients of the demo: those iterations are
// skipped (no optimizer step, no lr-scheduler step), counted in the log line,
// and the scale backs off until a step succeeds. bf16: no scaler, the storage
// rounding is real, so the numbers move away from fp32 while training works.
#include <cmath>

#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

using Fp16 = MtrainTest;
using Bf16 = MtrainTest;

TEST_F(Fp16, DynamicLossScaleBacksOffThroughOverflowsThenTrains) {
  constexpr int kIters = 15;
  const fs::path out = tmp_ / "out";
  const RunResult r = run(concat(demo_sft_args(kIters, out), {"--fp16"}));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "dtype float16")) << r.out;
  const auto lines = training_lines(r.out);
  const auto rows = train_rows(out);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kIters));
  ASSERT_EQ(rows.size(), static_cast<size_t>(kIters));

  // s: the first iteration whose step went through.
  size_t s = 0;
  while (s < rows.size() && rows[s].at("skipped_iterations").get<int>() == 1) ++s;
  ASSERT_GE(s, 2u) << "2^32 should overflow at least the first two iterations (hysteresis 2)\n" << r.out;
  ASSERT_LE(s, static_cast<size_t>(kIters - 2)) << "no two successful steps in " << kIters << " iterations\n" << r.out;

  double scale = 4294967296.0;  // --initial_loss_scale 2^32
  for (size_t i = 0; i < s; ++i) {
    SCOPED_TRACE("iteration " + std::to_string(i + 1) + ": " + lines[i]);
    // Hysteresis 2: the first overflow only decrements the tracker; every later one halves the scale.
    if (i > 0) scale /= 2;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f", scale);
    EXPECT_EQ(field(lines[i], "loss scale"), buf);
    EXPECT_EQ(rows[i].at("loss_scale").get<double>(), scale);
    EXPECT_EQ(field(lines[i], "number of skipped iterations"), "  1");
    EXPECT_EQ(field(lines[i], "number of nan iterations"), "  0");
    EXPECT_EQ(field(lines[i], "lm loss"), "") << "Megatron omits the loss of an interval without a successful step";
    // No scheduler step yet: the warmup lr is still at step 0.
    EXPECT_EQ(field(lines[i], "learning rate"), "0.000000E+00");
  }
  for (size_t i = s; i < rows.size(); ++i) {
    SCOPED_TRACE("iteration " + std::to_string(i + 1) + ": " + lines[i]);
    EXPECT_EQ(field(lines[i], "number of skipped iterations"), "  0");
    EXPECT_EQ(field(lines[i], "number of nan iterations"), "  0");
    EXPECT_EQ(rows[i].at("loss_scale").get<double>(), scale) << "no growth within --loss_scale_window 1000";
    const double loss = rows[i].at("loss").get<double>(), gn = rows[i].at("grad_norm").get<double>();
    EXPECT_TRUE(std::isfinite(loss) && std::isfinite(gn));
    EXPECT_GT(loss, 6.0);  // an untrained 1024-token model: about ln(1024) = 6.93
    EXPECT_LT(loss, 7.5);
    EXPECT_GT(gn, 0.0);
    EXPECT_EQ(field(lines[i], "lm loss"), sci6(loss));
  }
  // The first successful step is the scheduler's first: 3e-3 * 1 / 20, then 2 / 20.
  EXPECT_EQ(field(lines[s], "learning rate"), "1.500000E-04");
  EXPECT_EQ(field(lines[s + 1], "learning rate"), "3.000000E-04");
}

// Megatron's optimizer returns grad_norm None for a step skipped on overflow,
// and training_log prints ' grad norm: {:.3f} |' only when it is not None.
TEST_F(Fp16, SkippedIterationLogLineHasNoGradNorm) {
  const RunResult r = run(concat(demo_sft_args(2, tmp_ / "out"), {"--fp16"}));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const auto lines = training_lines(r.out);
  ASSERT_EQ(lines.size(), 2u);
  for (const std::string& line : lines) {
    ASSERT_EQ(field(line, "number of skipped iterations"), "  1") << line;
    EXPECT_FALSE(contains(line, " grad norm: ")) << line;
  }
}

// Per-iteration bf16 losses against the fp32 golden values of the same run
// (tests/functional/golden/sft_demo_20.json): close (same model, data, init)
// but not equal (the rounding to bf16 is real), and training works.
TEST_F(Bf16, TrainsWithFiniteFallingLossThatDiffersFromFp32) {
  constexpr int kIters = 6;
  const fs::path out = tmp_ / "out";
  const RunResult r = run(concat(demo_sft_args(kIters, out), {"--bf16"}));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "dtype bfloat16")) << r.out;
  const auto rows = train_rows(out);
  const auto lines = training_lines(r.out);
  ASSERT_EQ(rows.size(), static_cast<size_t>(kIters));
  const nlohmann::json fp32 =
      nlohmann::json::parse(read_text(fs::path(MTRAIN_SOURCE_DIR) / "tests/functional/golden/sft_demo_20.json"))
          .at("lm loss")
          .at("values");
  for (size_t i = 0; i < rows.size(); ++i) {
    SCOPED_TRACE("iteration " + std::to_string(i + 1));
    const double loss = rows[i].at("loss").get<double>();
    const double ref = fp32.at(std::to_string(i + 1)).get<double>();
    ASSERT_TRUE(std::isfinite(loss));
    EXPECT_GT(std::fabs(loss - ref) / ref, 1e-6) << "bf16 loss " << loss << " equals the fp32 loss " << ref;
    EXPECT_LT(std::fabs(loss - ref) / ref, 2e-2) << "bf16 loss " << loss << " is far from the fp32 loss " << ref;
    EXPECT_EQ(field(lines[i], "loss scale"), "1.0");
    EXPECT_EQ(field(lines[i], "number of skipped iterations"), "  0");
  }
  // fp32 goes from 6.98 to 5.36 in these 6 iterations.
  EXPECT_LT(rows.back().at("loss").get<double>(), 0.85 * rows.front().at("loss").get<double>());
}

}  // namespace
}  // namespace mtrain::functional
