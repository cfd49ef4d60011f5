// The optimizer step's device work as the cost model sees it: each pass over
// memory (fp16 unscale-and-check, grad norm, clip, Adam / SGD update, the
// main->model param copy) opens its own kernel region whose bytes are what it
// reads and writes per element, at each operand's own size: fp32 (4 bytes)
// main params, grads and states, 2-byte bf16 / fp16 model params. The
// expected values are written out below as that arithmetic, independently of
// lib/optim. Under the distributed optimizer only the rank's shard is counted;
// a meta optimizer (a dry run) reports the same regions and computes nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "device/device.h"
#include "optim/grad_clip.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "profiler/kernel_region.h"

namespace mtrain::optim {
namespace {

struct Seen {
  std::string name;
  double flops = 0, bytes = 0;
};

// Records every kernel region this thread opens while it is installed.
class KernelLog : public profiler::Listener {
 public:
  KernelLog() : previous_(profiler::set_listener(this, profiler::Kind::kKernel, false)) {}
  ~KernelLog() override { profiler::set_listener(previous_, profiler::Kind::kKernel, false); }
  void begin(const profiler::Region& r, std::span<const profiler::TensorRef>) override {
    if (r.kind == profiler::Kind::kKernel) seen.push_back({r.name, r.work.flops, r.work.bytes});
  }
  void end(const profiler::Region&, std::span<const profiler::TensorRef>) override {}
  std::vector<Seen> seen;

 private:
  profiler::Listener* previous_;
};

constexpr double kF32 = 4, kHalf = 2;  // bytes per element

OptimizerConfig config(const std::string& type, double momentum = 0.9) {
  OptimizerConfig c;
  c.type = type;
  c.sgd_momentum = momentum;
  return c;
}

// Runs one step of an optimizer over n parameters (one range) and returns the regions it opened.
std::vector<Seen> step_regions(const std::string& type, DType dtype, double momentum, bool meta,
                               FlatIntervals shard = {}) {
  const int64_t n = 1000;
  device::Device dev(device::DeviceProfile{}, 0);
  Optimizer opt(dev, {{"w", 0, n, true}}, n, dtype, config(type, momentum), shard, meta);
  std::vector<float> params(n, 0.5f), grads(n, 0.25f);
  opt.init_master_from(params.data());
  KernelLog log;
  opt.step(meta ? nullptr : params.data(), meta ? nullptr : grads.data(), 1e-3);
  return log.seen;
}

TEST(OptimizerKernels, AdamBf16UpdateThenMainToModelCopy) {
  const std::vector<Seen> k = step_regions("adam", DType::kBF16, 0.9, false);
  ASSERT_EQ(k.size(), 2u);
  // Update: read master param, grad, m, v; write master param, m, v (all fp32).
  EXPECT_EQ(k[0].name, "adam_update");
  EXPECT_EQ(k[0].bytes, 1000 * (4 * kF32 + 3 * kF32));
  EXPECT_EQ(k[0].flops, 1000 * 17.0);
  // Copy: read the fp32 master, write the bf16 model param.
  EXPECT_EQ(k[1].name, "main_to_model_params_copy");
  EXPECT_EQ(k[1].bytes, 1000 * (kF32 + kHalf));
}

TEST(OptimizerKernels, Fp32ModelHasNoCopy) {
  const std::vector<Seen> k = step_regions("adam", DType::kF32, 0.9, false);
  ASSERT_EQ(k.size(), 1u);
  EXPECT_EQ(k[0].bytes, 1000 * 7 * kF32);
}

TEST(OptimizerKernels, SgdWithAndWithoutMomentum) {
  // Momentum: read param, grad, buf; write param, buf.
  const std::vector<Seen> with = step_regions("sgd", DType::kF32, 0.9, false);
  ASSERT_EQ(with.size(), 1u);
  EXPECT_EQ(with[0].name, "sgd_update");
  EXPECT_EQ(with[0].bytes, 1000 * (3 * kF32 + 2 * kF32));
  // No momentum buffer: read param, grad; write param.
  const std::vector<Seen> without = step_regions("sgd", DType::kF16, 0.0, false);
  ASSERT_EQ(without.size(), 2u);
  EXPECT_EQ(without[0].bytes, 1000 * (2 * kF32 + kF32));
  EXPECT_EQ(without[1].bytes, 1000 * (kF32 + kHalf));
}

TEST(OptimizerKernels, DistributedOptimizerCountsOnlyTheShard) {
  // This rank updates [200, 450) and [900, 1000): 350 elements.
  const std::vector<Seen> k = step_regions("adam", DType::kBF16, 0.9, false, {{200, 450}, {900, 1000}});
  ASSERT_EQ(k.size(), 2u);
  EXPECT_EQ(k[0].bytes, 350 * 7 * kF32);
  EXPECT_EQ(k[1].bytes, 350 * (kF32 + kHalf));
}

TEST(OptimizerKernels, MetaOptimizerReportsTheSameRegions) {
  const std::vector<Seen> real = step_regions("adam", DType::kBF16, 0.9, false, {{0, 600}});
  const std::vector<Seen> meta = step_regions("adam", DType::kBF16, 0.9, true, {{0, 600}});
  ASSERT_EQ(real.size(), meta.size());
  for (size_t i = 0; i < real.size(); ++i) {
    EXPECT_EQ(real[i].name, meta[i].name);
    EXPECT_EQ(real[i].bytes, meta[i].bytes);
    EXPECT_EQ(real[i].flops, meta[i].flops);
  }
}

TEST(OptimizerKernels, GradNormClipAndOverflowCheck) {
  std::vector<float> g(1000, 2.0f);
  KernelLog log;
  // The norm pass over 400 fp32 gradients: each read once, squared and added.
  { profiler::Scope norm(grad_norm_region(400)); }
  // Unscale and check [0, 1000): each gradient read and written.
  EXPECT_FALSE(unscale_and_find_inf(g.data(), {{0, 1000}}, 0.5f));
  EXPECT_EQ(g[999], 1.0f);
  // Clip (norm 2 x sqrt(1000) > 1): read and write.
  clip_grads(g.data(), 1000, 1.0, 2.0 * std::sqrt(1000.0));
  ASSERT_EQ(log.seen.size(), 3u);
  EXPECT_EQ(log.seen[0].name, "grad_norm_sq");
  EXPECT_EQ(log.seen[0].bytes, 400 * kF32);
  EXPECT_EQ(log.seen[0].flops, 400 * 2.0);
  EXPECT_EQ(log.seen[1].name, "unscale_and_check_inf");
  EXPECT_EQ(log.seen[1].bytes, 1000 * 2 * kF32);
  EXPECT_EQ(log.seen[2].name, "clip_grads");
  EXPECT_EQ(log.seen[2].bytes, 1000 * 2 * kF32);
}

TEST(OptimizerKernels, UnscaleAndCheckFindsNonFiniteInAnyInterval) {
  std::vector<float> g(100, 1.0f);
  g[70] = 3e38f;  // finite, overflows to Inf once multiplied by 2
  EXPECT_FALSE(unscale_and_find_inf(g.data(), {{0, 50}}, 2.0f));
  EXPECT_EQ(g[0], 2.0f);
  EXPECT_EQ(g[60], 1.0f) << "outside the intervals: untouched";
  EXPECT_TRUE(unscale_and_find_inf(g.data(), {{0, 10}, {60, 80}}, 2.0f));
  g[70] = std::nanf("");
  EXPECT_TRUE(unscale_and_find_inf(g.data(), {{70, 71}}, 1.0f));
}

}  // namespace
}  // namespace mtrain::optim
