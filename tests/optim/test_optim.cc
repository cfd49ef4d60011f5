// Optimizer: AdamW and SGD against independent double-precision references and
// hand values, the bf16 master path, memory accounting, determinism.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/errors.h"
#include "common/rng.h"
#include "device/device.h"
#include "optim/optimizer.h"
#include "tensor/precision.h"

namespace mtrain::optim {
namespace {

using device::Device;
using device::DeviceProfile;
using device::MemCategory;

// A layout that crosses the optimizer's work-segment size, mixes decay and
// no-decay ranges, and leaves an uncovered gap at the end.
constexpr int64_t kNumel = 40000;
std::vector<ParamRange> test_ranges() {
  return {{"embedding.weight", 0, 20000, true},
          {"layers.0.norm.weight", 20000, 100, false},
          {"layers.0.mlp.fc1.weight", 20100, 18900, true},
          {"layers.0.mlp.fc1.bias", 39000, 100, false}};
}
constexpr int64_t kCovered = 39100;  // [kCovered, kNumel) belongs to no range

std::vector<float> random_vec(int64_t n, uint64_t seed, float lo, float hi) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * uniform01(seed, i);
  return v;
}

// torch.optim.AdamW written the textbook way, in double.
struct AdamRef {
  double b1 = 0, b2 = 0, eps = 0, wd = 0;
  std::vector<double> p, m, v;
  std::vector<bool> decay, covered;
  int t = 0;
  void step(const std::vector<float>& g, double lr) {
    ++t;
    const double bc1 = 1.0 - std::pow(b1, t), bc2 = 1.0 - std::pow(b2, t);
    for (size_t i = 0; i < p.size(); ++i) {
      if (!covered[i]) continue;
      if (decay[i]) p[i] *= 1.0 - lr * wd;
      m[i] = b1 * m[i] + (1.0 - b1) * g[i];
      v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i];
      p[i] -= lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + eps);
    }
  }
};

AdamRef make_ref(const std::vector<float>& p0, const OptimizerConfig& c) {
  AdamRef r;
  r.b1 = c.beta1;
  r.b2 = c.beta2;
  r.eps = c.eps;
  r.wd = c.weight_decay;
  r.p.assign(p0.begin(), p0.end());
  r.m.assign(p0.size(), 0.0);
  r.v.assign(p0.size(), 0.0);
  r.decay.assign(p0.size(), false);
  r.covered.assign(p0.size(), false);
  for (const ParamRange& pr : test_ranges()) {
    for (int64_t i = pr.offset; i < pr.offset + pr.numel; ++i) {
      r.decay[i] = pr.apply_weight_decay;
      r.covered[i] = true;
    }
  }
  return r;
}

OptimizerConfig adam_config(double wd) {
  OptimizerConfig c;
  c.type = "adam";
  c.beta1 = 0.9;
  c.beta2 = 0.95;
  c.eps = 1e-8;
  c.weight_decay = wd;
  return c;
}

constexpr double kLrs[] = {1e-2, 8e-3, 5e-3, 2e-3, 1e-3};

// Grads with a wide dynamic range so eps and the bias corrections matter.
std::vector<float> grads_for_step(int step) {
  std::vector<float> g = random_vec(kNumel, 1000 + step, -1.0f, 1.0f);
  for (int64_t i = 0; i < kNumel; i += 7) g[i] *= 1e-6f;
  return g;
}

class AdamW : public ::testing::TestWithParam<double> {};

TEST_P(AdamW, MatchesDoubleReferenceOverSeveralSteps) {
  const OptimizerConfig cfg = adam_config(GetParam());
  Device dev(DeviceProfile{}, 0);
  Optimizer opt(dev, test_ranges(), kNumel, DType::kF32, cfg);
  EXPECT_FALSE(opt.has_master());
  std::vector<float> p = random_vec(kNumel, 7, -2.0f, 2.0f);
  const std::vector<float> p0 = p;
  AdamRef ref = make_ref(p, cfg);
  for (int s = 0; s < 5; ++s) {
    const std::vector<float> g = grads_for_step(s);
    opt.step(p.data(), g.data(), kLrs[s]);
    ref.step(g, kLrs[s]);
  }
  EXPECT_EQ(opt.step_count(), 5);
  for (int64_t i = 0; i < kCovered; ++i) {
    ASSERT_NEAR(p[i], ref.p[i], 1e-6 + 1e-6 * std::fabs(ref.p[i])) << "element " << i;
  }
  for (int64_t i = kCovered; i < kNumel; ++i) ASSERT_EQ(p[i], p0[i]) << "uncovered element " << i << " changed";
}

INSTANTIATE_TEST_SUITE_P(WeightDecay, AdamW, ::testing::Values(0.0, 0.1),
                         [](const ::testing::TestParamInfo<double>& i) { return i.param == 0.0 ? "wd0" : "wd01"; });

TEST(AdamWHand, FirstStepIsSignOfGradPlusDecoupledDecay) {
  Device dev(DeviceProfile{}, 0);
  OptimizerConfig cfg = adam_config(0.1);
  cfg.beta2 = 0.999;
  Optimizer opt(dev, {{"w", 0, 1, true}, {"b", 1, 1, false}}, 2, DType::kF32, cfg);
  float p[2] = {1.0f, 1.0f};
  const float g[2] = {0.5f, -0.25f};
  opt.step(p, g, 0.01);
  // m_hat = g, v_hat = g^2: p -= lr * (g / (|g| + eps) + wd * p)
  EXPECT_NEAR(p[0], 1.0 - 0.01 * (0.5 / (0.5 + 1e-8) + 0.1), 1e-7);
  EXPECT_NEAR(p[1], 1.0 + 0.01 * (0.25 / (0.25 + 1e-8)), 1e-7);  // no decay on the bias
}

TEST(AdamWMaster, Bf16ModelKeepsFp32MasterAndPublishesRoundedParams) {
  const OptimizerConfig cfg = adam_config(0.1);
  Device dev(DeviceProfile{}, 0);
  Optimizer opt(dev, test_ranges(), kNumel, DType::kBF16, cfg);
  ASSERT_TRUE(opt.has_master());
  std::vector<float> p = random_vec(kNumel, 11, -2.0f, 2.0f);
  kernels::round_to_dtype(p.data(), kNumel, DType::kBF16);
  const std::vector<float> p0 = p;
  opt.init_master_from(p.data());
  AdamRef ref = make_ref(p, cfg);
  for (int s = 0; s < 5; ++s) {
    const std::vector<float> g = grads_for_step(s);
    opt.step(p.data(), g.data(), kLrs[s]);
    ref.step(g, kLrs[s]);
  }
  const float* master = opt.master();
  int64_t differs = 0;
  for (int64_t i = 0; i < kCovered; ++i) {
    ASSERT_NEAR(master[i], ref.p[i], 1e-6 + 1e-6 * std::fabs(ref.p[i])) << "master element " << i;
    ASSERT_EQ(p[i], kernels::round_bf16(master[i])) << "model element " << i;
    differs += p[i] != master[i];
  }
  EXPECT_GT(differs, kCovered / 2) << "the model params should be bf16-rounded, not fp32 copies";
  for (int64_t i = kCovered; i < kNumel; ++i) ASSERT_EQ(p[i], p0[i]);
}

TEST(AdamWMaster, StepBeforeInitMasterThrows) {
  Device dev(DeviceProfile{}, 0);
  Optimizer opt(dev, {{"w", 0, 4, true}}, 4, DType::kF16, adam_config(0.0));
  std::vector<float> p(4, 1.0f), g(4, 0.1f);
  EXPECT_THROW(opt.step(p.data(), g.data(), 1e-3), Error);
  EXPECT_EQ(opt.step_count(), 0);
}

TEST(AdamWMaster, SyncParamsFromMasterRoundsToModelDtype) {
  Device dev(DeviceProfile{}, 0);
  Optimizer opt(dev, {{"w", 0, 3, true}}, 3, DType::kBF16, adam_config(0.0));
  auto states = opt.state_tensors();
  Tensor* master = nullptr;
  for (auto& [name, t] : states) {
    if (name == "fp32_param") master = t;
  }
  ASSERT_NE(master, nullptr);
  master->data()[0] = 1.00390625f;  // 1 + 2^-8: halfway between bf16 1.0 and 1.0078125 -> even (1.0)
  master->data()[1] = 3.14159265f;
  master->data()[2] = -0.1f;
  float p[3] = {0, 0, 0};
  opt.sync_params_from_master(p);
  EXPECT_EQ(p[0], 1.0f);
  EXPECT_EQ(p[1], kernels::round_bf16(3.14159265f));
  EXPECT_EQ(p[2], kernels::round_bf16(-0.1f));
  float g[3] = {0, 0, 0};
  EXPECT_NO_THROW(opt.step(p, g, 1e-3));  // master is valid now
}

TEST(Optimizer, BitIdenticalForAnyThreadCount) {
  const OptimizerConfig cfg = adam_config(0.1);
  std::vector<float> results[2];
  for (int threads : {1, 2}) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    Device dev(DeviceProfile{}, 0);
    Optimizer opt(dev, test_ranges(), kNumel, DType::kBF16, cfg);
    std::vector<float> p = random_vec(kNumel, 3, -1.0f, 1.0f);
    opt.init_master_from(p.data());
    for (int s = 0; s < 3; ++s) opt.step(p.data(), grads_for_step(s).data(), kLrs[s]);
    results[threads - 1].assign(opt.master(), opt.master() + kNumel);
    omp_set_num_threads(saved);
  }
  EXPECT_EQ(results[0], results[1]);
}

TEST(Sgd, MomentumAndCoupledWeightDecayMatchHandValues) {
  Device dev(DeviceProfile{}, 0);
  OptimizerConfig cfg;
  cfg.type = "sgd";
  cfg.sgd_momentum = 0.9;
  cfg.weight_decay = 0.1;
  Optimizer opt(dev, {{"w", 0, 1, true}, {"b", 1, 1, false}}, 2, DType::kF32, cfg);
  float p[2] = {1.0f, 1.0f};
  const float grads[3][2] = {{0.5f, 0.5f}, {0.5f, 0.5f}, {-0.2f, -0.2f}};
  // w: d = g + wd p; buf = 0.9 buf + d; p -= lr buf.   b: the same without wd.
  const double want_w[3] = {0.94, 0.8266, 0.736274};
  const double want_b[3] = {0.95, 0.855, 0.7895};
  for (int s = 0; s < 3; ++s) {
    opt.step(p, grads[s], 0.1);
    EXPECT_NEAR(p[0], want_w[s], 1e-6) << "step " << s + 1;
    EXPECT_NEAR(p[1], want_b[s], 1e-6) << "step " << s + 1;
  }
}

TEST(Sgd, WithoutMomentumIsPlainDescent) {
  Device dev(DeviceProfile{}, 0);
  OptimizerConfig cfg;
  cfg.type = "sgd";
  cfg.sgd_momentum = 0.0;
  cfg.weight_decay = 0.1;
  Optimizer opt(dev, {{"w", 0, 1, true}}, 1, DType::kF32, cfg);
  EXPECT_TRUE(opt.state_tensors().empty());
  float p = 1.0f;
  const float g = 0.5f;
  opt.step(&p, &g, 0.1);
  EXPECT_NEAR(p, 0.94, 1e-7);
  opt.step(&p, &g, 0.1);
  EXPECT_NEAR(p, 0.8806, 1e-7);
}

struct MemCase {
  const char* type;
  double momentum;
  DType dtype;
  int64_t bytes_per_param;
};

std::string mem_case_name(const ::testing::TestParamInfo<MemCase>& info) {
  const MemCase& c = info.param;
  return std::string(c.type) + (c.momentum != 0.0 ? "_momentum_" : "_") + dtype_name(c.dtype);
}

class OptimizerMemory : public ::testing::TestWithParam<MemCase> {};

TEST_P(OptimizerMemory, AccountsStatesOnTheDevice) {
  const MemCase mc = GetParam();
  const int64_t n = 12345;
  OptimizerConfig cfg;
  cfg.type = mc.type;
  cfg.sgd_momentum = mc.momentum;
  EXPECT_EQ(Optimizer::state_bytes(n, mc.dtype, cfg), mc.bytes_per_param * n);
  for (bool meta : {false, true}) {
    Device dev(DeviceProfile{}, 0);
    {
      Optimizer opt(dev, {{"w", 0, n, true}}, n, mc.dtype, cfg, meta);
      EXPECT_EQ(dev.stats().allocated, mc.bytes_per_param * n);
      EXPECT_EQ(dev.stats().by_category[static_cast<int>(MemCategory::kOptimizer)], mc.bytes_per_param * n);
    }
    EXPECT_EQ(dev.stats().allocated, 0) << "states must be released with the optimizer";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, OptimizerMemory,
                         ::testing::Values(MemCase{"adam", 0.0, DType::kF32, 8}, MemCase{"adam", 0.0, DType::kBF16, 12},
                                           MemCase{"adam", 0.0, DType::kF16, 12}, MemCase{"sgd", 0.9, DType::kF32, 4},
                                           MemCase{"sgd", 0.0, DType::kF32, 0}, MemCase{"sgd", 0.9, DType::kBF16, 8}),
                         mem_case_name);

TEST(Optimizer, MetaStepOnlyCounts) {
  Device dev(DeviceProfile{}, 0);
  Optimizer opt(dev, {{"w", 0, 1 << 20, true}}, 1 << 20, DType::kBF16, adam_config(0.1), /*meta=*/true);
  opt.init_master_from(nullptr);
  opt.step(nullptr, nullptr, 1e-3);
  EXPECT_EQ(opt.step_count(), 1);
}

TEST(Optimizer, OutOfMemoryWhenStatesDoNotFit) {
  DeviceProfile small;
  small.hbm_bytes = 64 << 20;
  Device dev(small, 0);
  const int64_t n = 8 << 20;  // 8M params * 12 bytes (m, v, master) = 96 MiB > 64 MiB
  EXPECT_THROW(Optimizer(dev, {{"w", 0, n, true}}, n, DType::kBF16, adam_config(0.1), true), OutOfMemoryError);
  EXPECT_EQ(dev.stats().allocated, 0) << "a failed construction must give back what it took";
}

TEST(Optimizer, RejectsBadRangesAndTypes) {
  Device dev(DeviceProfile{}, 0);
  EXPECT_THROW(Optimizer(dev, {{"a", 0, 10, true}, {"b", 5, 10, true}}, 20, DType::kF32, adam_config(0)), Error);
  EXPECT_THROW(Optimizer(dev, {{"a", 15, 10, true}}, 20, DType::kF32, adam_config(0)), Error);
  OptimizerConfig bad = adam_config(0);
  bad.type = "lamb";
  EXPECT_THROW(Optimizer(dev, {{"a", 0, 10, true}}, 10, DType::kF32, bad), ConfigError);
  EXPECT_EQ(dev.stats().allocated, 0);
}

}  // namespace
}  // namespace mtrain::optim
