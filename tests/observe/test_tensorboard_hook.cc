// observe/tensorboard_hook.h fed synthetic step metrics, read back with the
// tests' own reader (tests/tensorboard/event_file_reader.h): which tags at
// which steps for --tensorboard_log_interval, --log_interval and each
// --log_*_to_tensorboard flag, and when the queue reaches the file.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <map>

#include "observe/tensorboard_hook.h"
#include "tensorboard/event_file_reader.h"

namespace mtrain::observe {
namespace {

namespace fs = std::filesystem;
using tbtest::TempDir;

StepMetrics step(int64_t it, int64_t train_iters) {
  StepMetrics m;
  m.iteration = it;
  m.train_iters = train_iters;
  m.consumed_samples = 8 * it;
  m.global_batch_size = 8;
  m.lm_loss = 10.0 / it;
  m.learning_rate = 1e-3 * it;
  m.grad_norm = 0.25 * it;
  m.loss_scale = 1;
  m.elapsed_ms = 100.0 * it;
  return m;
}

// tag -> steps, from the hook's file.
std::map<std::string, std::vector<int64_t>> steps_by_tag(const TensorBoardHook& h) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& p : tbtest::scalars(tbtest::read_event_file(h.path()))) out[p.tag].push_back(p.step);
  return out;
}

class TensorBoardHookTest : public ::testing::Test {
 protected:
  TensorBoardOptions options(int64_t log_interval) const {
    TensorBoardOptions o;
    o.dir = dir_.path.string();
    o.log_interval = log_interval;
    return o;
  }
  TempDir dir_;
  device::Device dev_{device::DeviceProfile{}, 0};
};

TEST_F(TensorBoardHookTest, IntervalsSelectTheStepsOfEachTag) {
  TensorBoardOptions o = options(3);
  o.interval = 2;
  o.timers = true;
  TensorBoardHook h(o, dev_);
  h.on_train_begin({});
  for (int it = 1; it <= 7; ++it) h.on_step_end(step(it, 7));
  h.on_train_end({});
  auto s = steps_by_tag(h);
  EXPECT_EQ(s["lm loss"], (std::vector<int64_t>{2, 4, 6}));
  EXPECT_EQ(s["lm loss vs samples"], (std::vector<int64_t>{16, 32, 48}));
  EXPECT_EQ(s["loss-scale"], (std::vector<int64_t>{2, 4, 6}));
  // Log lines at 3, 6 and the last iteration.
  EXPECT_EQ(s["iteration-time"], (std::vector<int64_t>{3, 6, 7}));
  EXPECT_EQ(s.count("world-size"), 0u);
  EXPECT_EQ(s.count("mem-allocated-bytes"), 0u);
  EXPECT_EQ(s.count("throughput"), 0u);
  // iteration-time: the interval's mean in seconds, e.g. (400 + 500 + 600) ms / 3.
  for (const auto& p : tbtest::scalars(tbtest::read_event_file(h.path()))) {
    if (p.tag == "iteration-time" && p.step == 6) {
      EXPECT_EQ(p.value, 0.5f);
    }
  }
}

TEST_F(TensorBoardHookTest, QueueReachesTheFileAtLogLinesNotBefore) {
  TensorBoardHook h(options(3), dev_);
  h.on_train_begin({});
  h.on_step_end(step(1, 10));
  h.on_step_end(step(2, 10));
  EXPECT_TRUE(steps_by_tag(h).empty());
  h.on_step_end(step(3, 10));
  EXPECT_EQ(steps_by_tag(h)["lm loss"], (std::vector<int64_t>{1, 2, 3}));
  h.on_step_end(step(4, 10));
  h.on_eval_end({4, 2.0, false});  // an evaluation writes the queue too
  auto s = steps_by_tag(h);
  EXPECT_EQ(s["lm loss"], (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(s["lm loss validation"], (std::vector<int64_t>{4}));
  EXPECT_EQ(s["lm loss validation vs samples"], (std::vector<int64_t>{32}));
  EXPECT_EQ(s.count("lm loss validation ppl"), 0u);
}

TEST_F(TensorBoardHookTest, OptionalTagsFollowTheirFlagsAndValues) {
  TensorBoardOptions o = options(1);
  o.timers = o.memory = o.validation_ppl = o.world_size = true;
  o.loss_scale = false;
  o.world_size_value = 4;
  o.log_throughput = true;
  o.flops_per_iteration = 3e12;
  o.simulated_step_seconds = [] { return 0.125; };
  TensorBoardHook h(o, dev_);
  h.on_train_begin({});
  StepMetrics m = step(1, 1);
  m.has_num_zeros = m.has_params_norm = true;
  m.num_zeros = 12;
  m.params_norm = 3.5;
  m.has_grad_norm = false;  // an fp16 overflow skip: Megatron writes no grad-norm
  h.on_step_end(m);
  h.on_eval_end({1, 30.0, true});
  std::map<std::string, float> v;
  for (const auto& p : tbtest::scalars(tbtest::read_event_file(h.path()))) v[p.tag] = p.value;
  EXPECT_EQ(v.count("loss-scale"), 0u);
  EXPECT_EQ(v.count("grad-norm"), 0u);
  EXPECT_EQ(v.at("world-size"), 4.0f);
  EXPECT_EQ(v.at("num-zeros vs samples"), 12.0f);
  EXPECT_EQ(v.at("params-norm"), 3.5f);
  // Megatron: FLOPs / (seconds x 1e12 x world size) = 3e12 / (0.1 x 1e12 x 4).
  EXPECT_FLOAT_EQ(v.at("throughput"), 7.5f);
  EXPECT_EQ(v.at("simulated-iteration-time"), 0.125f);
  // ppl = exp(min(20, loss)).
  EXPECT_EQ(v.at("lm loss validation ppl"), static_cast<float>(std::exp(20.0)));
  EXPECT_EQ(v.at("mem-allocated-bytes"), 0.0f);  // nothing allocated on this device
  EXPECT_EQ(v.count("npu-memory/optimizer-states-bytes"), 1u);
}

}  // namespace
}  // namespace mtrain::observe
