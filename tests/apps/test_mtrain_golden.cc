// End-to-end numbers of the real binary: per-iteration golden losses and
// gradient norms of the demo jobs (Megatron's functional-test style), a loss
// that actually falls, and bit-identical reruns from a seed.
//
// Golden files live in tests/functional/golden/ and change only through
// scripts/regen_golden.sh (MTRAIN_REGEN_GOLDEN=1 makes these tests write them).
#include <cmath>
#include <cstdlib>

#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

using nlohmann::ordered_json;

bool regen_requested() {
  const char* e = std::getenv("MTRAIN_REGEN_GOLDEN");
  return e && std::string(e) == "1";
}

// Relative tolerances, written into the golden file when it is regenerated.
// Why not exact: the values are fp32 sums whose order depends on the OpenBLAS
// kernel picked for the CPU (AVX2/AVX-512 blocking, FMA contraction) and on the
// compiler's FMA use with -march=native, and training amplifies a 1-ulp
// difference step by step. Measured on this machine, changing only the thread
// count (= changing the reduction order) moves the loss of the demo's first 20
// iterations by at most 1.4e-6 relative, but the gradient norm by up to 2e-4 at
// iteration 20 (it grows ~10x every 3 iterations after iteration 10). So the
// loss is held to 1e-4 and the gradient norm to 1e-3. Any real change of the
// math (a wrong scale, a missing term, a different data order) moves both by
// far more.
constexpr double kLossRelTol = 1e-4;
constexpr double kGradNormRelTol = 1e-3;

struct GoldenCase {
  std::string file;               // under tests/functional/golden/
  std::vector<std::string> args;  // mtrain arguments, without --output_dir
  std::string description;
  bool loss_must_fall = false;  // also assert that training reduces the loss
  // The gradient norm is compared up to this iteration (0: every one). A
  // chaotic run (the sft demo's lr 3e-3) amplifies rounding ~10x every two
  // iterations: across OpenBLAS core types and a build without -march=native
  // its grad norm spread is ~1e-6 relative at iteration 13 but 7.9e-4 of the
  // 1e-3 bound at iteration 19 (docs/DESIGN-NOTES.md, "Tolerances"), so the
  // late values would pass or fail by CPU. Up to iteration 14 the margin is
  // ~100x; the loss of every iteration is still compared.
  int64_t grad_norm_through = 0;
};

// metric name in the golden file -> key in logging.jsonl
const std::vector<std::pair<std::string, std::string>> kMetrics = {{"lm loss", "loss"}, {"grad norm", "grad_norm"}};

fs::path golden_path(const std::string& file) { return fs::path(MTRAIN_SOURCE_DIR) / "tests/functional/golden" / file; }

std::vector<std::string> without_output_dir(std::vector<std::string> args) {
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--output_dir") {
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(i), args.begin() + static_cast<std::ptrdiff_t>(i) + 2);
      break;
    }
  return args;
}

ordered_json make_golden(const GoldenCase& c, const std::vector<nlohmann::json>& rows) {
  ordered_json g;
  g["description"] = c.description;
  g["command"] = "mtrain " + join(c.args);
  g["regenerate"] = "scripts/regen_golden.sh (rebuilds, runs the Golden tests with MTRAIN_REGEN_GOLDEN=1)";
  g["relative_tolerance"] = {{"lm loss", kLossRelTol}, {"grad norm", kGradNormRelTol}};
  g["tolerance_note"] =
      "fp32 results depend on the OpenBLAS kernel chosen for the CPU and on FMA contraction (-march=native); "
      "training amplifies 1-ulp differences. Changing only the thread count moves the demo's loss by <= 1.4e-6 "
      "and its grad norm by <= 2e-4 (relative) over 20 iterations, hence 1e-4 for the loss and 1e-3 for the "
      "grad norm. Runs use --num_threads 1 so that a rerun on the same machine is bit-identical.";
  for (const auto& [name, key] : kMetrics) {
    ordered_json values = ordered_json::object();
    for (const auto& r : rows) values[std::to_string(iteration_of(r))] = r.at(key).get<double>();
    g[name] = {{"start_step", iteration_of(rows.front())},
               {"end_step", iteration_of(rows.back())},
               {"step_interval", 1},
               {"values", values}};
  }
  return g;
}

class Golden : public MtrainTest {
 protected:
  void check_golden(const GoldenCase& c) {
    const fs::path out = tmp_ / "out";
    const RunResult r = run(concat(c.args, {"--output_dir", out.string()}));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    const std::vector<nlohmann::json> rows = train_rows(out);
    ASSERT_FALSE(rows.empty()) << r.describe();

    // The model learns, whatever the golden file says (checked before a
    // regeneration too, so a regenerated file cannot bless a model that
    // stopped learning): the mean loss of the last 5 logged iterations is
    // below 0.6x that of the first 5.
    if (c.loss_must_fall) {
      ASSERT_GE(rows.size(), 10u);
      double first = 0, last = 0;
      for (size_t i = 0; i < 5; ++i) {
        first += rows[i].at("loss").get<double>() / 5;
        last += rows[rows.size() - 1 - i].at("loss").get<double>() / 5;
      }
      EXPECT_LT(last, 0.6 * first) << "the loss did not fall: first 5 iterations " << first << ", last 5 " << last;
    }

    const fs::path gp = golden_path(c.file);
    if (regen_requested()) {
      fs::create_directories(gp.parent_path());
      write_text(gp, make_golden(c, rows).dump(2) + "\n");
      std::printf("[ regen ] wrote %s\n", gp.c_str());
      return;
    }
    ASSERT_TRUE(fs::exists(gp)) << gp << " is missing: run scripts/regen_golden.sh";
    const nlohmann::json g = nlohmann::json::parse(read_text(gp));
    ASSERT_EQ(g.at("command").get<std::string>(), "mtrain " + join(c.args))
        << "the test's command changed but " << gp << " was not regenerated (scripts/regen_golden.sh)";

    for (const auto& [name, key] : kMetrics) {
      const nlohmann::json& m = g.at(name);
      const double tol = g.at("relative_tolerance").at(name).get<double>();
      const int64_t start = m.at("start_step").get<int64_t>(), end = m.at("end_step").get<int64_t>();
      ASSERT_EQ(static_cast<int64_t>(rows.size()), end - start + 1) << name << ": number of logged iterations";
      for (const auto& row : rows) {
        const int64_t it = iteration_of(row);
        if (name == "grad norm" && c.grad_norm_through > 0 && it > c.grad_norm_through) continue;
        const std::string k = std::to_string(it);
        ASSERT_TRUE(m.at("values").contains(k)) << name << ": no golden value for iteration " << it;
        const double want = m.at("values").at(k).get<double>();
        const double got = row.at(key).get<double>();
        EXPECT_LE(std::fabs(got - want), tol * std::fabs(want))
            << name << " at iteration " << it << ": got " << got << ", golden " << want << " (relative error "
            << std::fabs(got - want) / std::fabs(want) << " > " << tol << ")";
      }
    }
  }
};

TEST_F(Golden, SftDemoFirst20Iterations) {
  check_golden({"sft_demo_20.json", without_output_dir(demo_sft_args(20, "")),
                "mtrain sft on configs/sft_demo.yaml (the scripts/demo.sh job): per-iteration lm loss and pre-clip "
                "grad norm of the first 20 iterations (warmup), seed 42, fp32, one thread",
                /*loss_must_fall=*/true, /*grad_norm_through=*/14});
}

TEST_F(Golden, PtDemoFirst10Iterations) {
  check_golden({"pt_demo_10.json", without_output_dir(demo_pt_args(10, "")),
                "mtrain pt on the demo preset and configs/demo/pt.txt: per-iteration lm loss and pre-clip grad norm "
                "of the first 10 iterations, 2 micro-batches per step, seed 42, fp32, one thread"});
}

// Megatron's padded vocabulary: --make_vocab_size_divisible_by 1100 pads the
// demo's 1024 tokens with 76 dummy ids even at TP=1, and
// --mask_padded_vocab false lets their logits join the softmax as Megatron
// does. The golden values were written by scripts/regen_golden.sh before the
// padded ids were masked (commit b1054df, the same command without the flag),
// so this pins that the Megatron-compatible path did not change.
TEST_F(Golden, PtDemoMegatronPaddedVocabFirst10Iterations) {
  check_golden({"pt_demo_padded_vocab_megatron_10.json",
                concat(without_output_dir(demo_pt_args(10, "")),
                       words("--make_vocab_size_divisible_by 1100 --mask_padded_vocab false")),
                "mtrain pt on the demo preset with 76 padded vocabulary ids whose logits join the softmax "
                "(Megatron's behaviour, --mask_padded_vocab false): per-iteration lm loss and pre-clip grad norm of "
                "the first 10 iterations, seed 42, fp32, one thread"});
}

using Determinism = MtrainTest;

// Same command twice -> the same bits; a different --seed -> different
// numbers (so the comparison is not vacuous). Dropout is switched on so the
// per-(iteration, micro-batch) dropout streams are exercised too.
TEST_F(Determinism, SameSeedGivesBitIdenticalLossesAndAnotherSeedDoesNot) {
  constexpr int kIters = 4;
  auto args = [&](const std::string& dir, int iters, const std::string& seed) {
    return concat(demo_sft_args(iters, tmp_ / dir),
                  {"--hidden_dropout", "0.1", "--attention_dropout", "0.1", "--seed", seed});
  };
  const RunResult a = run(args("a", kIters, "42"), "a");
  const RunResult b = run(args("b", kIters, "42"), "b");
  const RunResult c = run(args("c", 1, "7"), "c");
  ASSERT_EQ(a.exit_code, 0) << a.describe();
  ASSERT_EQ(b.exit_code, 0) << b.describe();
  ASSERT_EQ(c.exit_code, 0) << c.describe();

  const auto ra = train_rows(tmp_ / "a"), rb = train_rows(tmp_ / "b"), rc = train_rows(tmp_ / "c");
  ASSERT_EQ(ra.size(), static_cast<size_t>(kIters));
  ASSERT_EQ(rb.size(), static_cast<size_t>(kIters));
  ASSERT_EQ(rc.size(), 1u);
  for (size_t i = 0; i < ra.size(); ++i) {
    // logging.jsonl stores doubles with round-trip precision: equal text = equal bits.
    for (const char* key : {"loss", "grad_norm", "learning_rate", "consumed_samples"})
      EXPECT_EQ(ra[i].at(key).dump(), rb[i].at(key).dump()) << key << " at iteration " << i + 1;
  }
  // The log lines agree too, once the timestamp and timing fields are dropped.
  const auto la = training_lines(a.out), lb = training_lines(b.out);
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i)
    for (const char* key : {"lm loss", "grad norm", "learning rate"})
      EXPECT_EQ(field(la[i], key), field(lb[i], key)) << key << " in line " << i + 1;

  // Another seed: other initial weights (and other dropout masks).
  EXPECT_NE(ra[0].at("loss").dump(), rc[0].at("loss").dump()) << "--seed has no effect on the first loss";
  EXPECT_NE(ra[0].at("grad_norm").dump(), rc[0].at("grad_norm").dump()) << "--seed has no effect";
}

}  // namespace
}  // namespace mtrain::functional
