// The training loop: gradient accumulation equals one big micro-batch,
// non-finite values stop the run before the optimizer touches the weights
// (or are skipped on request), and hooks see every step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/errors.h"
#include "common/rng.h"
#include "data/loader.h"
#include "test_util/fp32_bounds.h"
#include "tiny_training.h"
#include "train/trainer.h"

namespace mtrain::train {
namespace {

struct Recorder : observe::TrainHook {
  std::vector<observe::StepMetrics> steps;
  void on_step_end(const observe::StepMetrics& m) override { steps.push_back(m); }
};

struct RunResult {
  std::vector<observe::StepMetrics> steps;
  std::vector<float> params;
};

RunResult train_with(int64_t mbs, int iters, float poison = 0.f, bool skip = false, const char* optimizer = "adam") {
  device::Device dev(device::DeviceProfile{}, 0);
  model::ModelConfig c = tiny();
  model::GptModel m(c, dev);
  if (poison != 0.f) m.params().params().data()[0] = poison;
  const std::vector<optim::ParamRange> ranges = optimizer_ranges(m.params());
  optim::OptimizerConfig oc;
  oc.type = optimizer;
  optim::Optimizer opt(dev, ranges, m.params().numel(), DType::kF32, oc);
  optim::LrScheduler sched(constant_lr(1e-2));
  FixedSource src(mbs);
  observe::HookList hooks;
  auto rec = std::make_shared<Recorder>();
  hooks.add(rec);
  TrainerOptions to;
  to.train_iters = iters;
  to.global_batch_size = 4;
  to.skip_nonfinite = skip;
  to.max_consecutive_skips = 2;
  Trainer t(to, m, opt, sched, nullptr, src, nullptr, hooks);
  RunResult r;
  try {
    t.train();
  } catch (...) {
    r.steps = rec->steps;
    r.params.assign(m.params().params().data(), m.params().params().data() + m.params().numel());
    throw;
  }
  r.steps = rec->steps;
  r.params.assign(m.params().params().data(), m.params().params().data() + m.params().numel());
  return r;
}

// One micro-batch of 4 and four of 1 sum the same gradients in another order.
// As in the model tests (model_test_util.h: kPathRtol), about 50 stages of
// sums of at most 48 terms (4 x 12 tokens) keep two orders within
// 2 * 50 * gamma_48 of the gradient's scale. SGD (lr 1e-2, momentum 0.9) turns
// that into a parameter difference of at most lr * (1 + 1.9 + 2.71) times the
// gradient difference after 3 steps. (Not Adam: it moves an element whose
// gradient is below rounding noise by about lr whatever its size, so Adam's
// parameters have no fp32 bound.)
TEST(Trainer, GradientAccumulationEqualsOneMicroBatch) {
  const double rtol = 2 * 50 * mtrain::testing::fp32_gamma(48);
  const RunResult one = train_with(4, 3, 0.f, false, "sgd");
  const RunResult four = train_with(1, 3, 0.f, false, "sgd");
  ASSERT_EQ(one.steps.size(), 3u);
  ASSERT_EQ(four.steps.size(), 3u);
  double max_grad_norm = 0.0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(one.steps[i].lm_loss, four.steps[i].lm_loss, rtol * one.steps[i].lm_loss);
    EXPECT_NEAR(one.steps[i].grad_norm, four.steps[i].grad_norm, rtol * one.steps[i].grad_norm);
    EXPECT_EQ(one.steps[i].consumed_samples, 4 * (i + 1));
    max_grad_norm = std::max(max_grad_norm, one.steps[i].grad_norm);
  }
  double max_diff = 0.0;
  for (size_t j = 0; j < one.params.size(); ++j)
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(one.params[j]) - four.params[j]));
  EXPECT_LE(max_diff, 1e-2 * (1 + 1.9 + 2.71) * rtol * max_grad_norm) << "parameters after 3 steps";
  EXPECT_GT(max_grad_norm, 0.0);
}

TEST(Trainer, NonFiniteStopsBeforeTheOptimizerStep) {
  const float inf = std::numeric_limits<float>::infinity();
  try {
    train_with(4, 3, inf);
    FAIL() << "expected NonFiniteError";
  } catch (const NonFiniteError& e) {
    EXPECT_EQ(e.code(), ExitCode::kNonFinite);
    EXPECT_NE(std::string(e.what()).find("iteration 1:"), std::string::npos) << e.what();
  }
}

TEST(Trainer, SkipModeCountsAndStopsAfterTheCap) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  try {
    train_with(4, 5, nan, /*skip=*/true);
    FAIL() << "expected NonFiniteError after 2 consecutive skips";
  } catch (const NonFiniteError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "non-finite in 3 consecutive iterations, more than --max_consecutive_nonfinite_skips 2 allows"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mtrain::train
