// The distributed optimizer (ZeRO-1): the sharded Optimizer on its own (state
// layout, untouched non-owned elements, errors, memory) and end to end on
// SimWorld DP 2/3/4 -- reduce_scatter -> sharded step -> all_gather must give
// bit-identically the params of an unsharded optimizer stepping on the summed
// gradients, for Adam and SGD, fp32 and bf16 (fp32 master) models.
#include <gtest/gtest.h>
#include <omp.h>

#include <ostream>
#include <string>
#include <vector>

#include "common/errors.h"
#include "common/rng.h"
#include "device/device.h"
#include "optim/optimizer.h"
#include "parallel/grad_buckets.h"
#include "parallel/sim_comm.h"
#include "tensor/precision.h"

namespace mtrain::optim {
namespace {

using device::Device;
using device::DeviceProfile;
using device::MemCategory;
using parallel::GradBuckets;

// Crosses the optimizer's work-segment size (16 Ki), mixes decay and no-decay
// ranges, leaves [39100, kNumel) uncovered; kNumel is a multiple of neither 3 nor 4.
constexpr int64_t kNumel = 40003;
std::vector<ParamRange> test_ranges() {
  return {{"embedding.weight", 0, 20000, true},
          {"layers.0.norm.weight", 20000, 100, false},
          {"layers.0.mlp.fc1.weight", 20100, 18900, true},
          {"layers.0.mlp.fc1.bias", 39000, 100, false}};
}
constexpr int64_t kCovered = 39100;
constexpr int kSteps = 4;
constexpr double kLrs[kSteps] = {1e-2, 8e-3, 5e-3, 2e-3};
constexpr double kScales[kSteps] = {1.0, 0.5, 1.0, 0.25};  // clip coefficients passed to step()

OptimizerConfig make_config(const std::string& type) {
  OptimizerConfig c;
  c.type = type;
  c.beta2 = 0.95;
  c.weight_decay = 0.1;
  c.sgd_momentum = 0.9;
  return c;
}

// Initial params (n floats), rounded to the model dtype.
std::vector<float> initial_params(int64_t n, DType dtype) {
  std::vector<float> p(n, 0.0f);
  for (int64_t i = 0; i < kNumel; ++i) p[i] = 4.0f * uniform01(7, i) - 2.0f;
  kernels::round_to_dtype(p.data(), n, dtype);
  return p;
}

// DP rank `rank`'s gradients at `step` (n floats, zero past kNumel), with a wide dynamic range.
std::vector<float> rank_grads(int64_t n, int step, int rank) {
  std::vector<float> g(n, 0.0f);
  const uint64_t seed = 1000 + 16 * step + rank;
  for (int64_t i = 0; i < kNumel; ++i) g[i] = (2.0f * uniform01(seed, i) - 1.0f) * (i % 7 == 0 ? 1e-6f : 1.0f);
  return g;
}

// ((g0 + g1) + g2) + ...: the DP sum in the Comm's rank order.
std::vector<float> summed_grads(int64_t n, int step, int dp) {
  std::vector<float> sum = rank_grads(n, step, 0);
  for (int r = 1; r < dp; ++r) {
    const std::vector<float> g = rank_grads(n, step, r);
    for (int64_t i = 0; i < n; ++i) sum[i] += g[i];
  }
  return sum;
}

int64_t optimizer_bytes(const Device& dev) {
  return dev.stats().by_category[static_cast<int>(MemCategory::kOptimizer)];
}

// Flat copy (P) of a state buffer: unsharded states are already flat.
std::vector<float> state_of(Optimizer& opt, const std::string& name) {
  for (auto& [n, t] : opt.state_tensors()) {
    if (n == name) return std::vector<float>(t->data(), t->data() + t->numel());
  }
  ADD_FAILURE() << "no state " << name;
  return {};
}

struct RankResult {
  std::vector<float> params;                                       // after the last all_gather (padded)
  std::vector<std::pair<std::string, std::vector<float>>> states;  // compact
  FlatIntervals intervals;                                         // what the compact states cover
  int64_t optimizer_bytes = 0;
};

struct DistCase {
  const char* type;
  DType dtype;
  int dp;
};

void PrintTo(const DistCase& c, std::ostream* os) { *os << c.type << " " << dtype_name(c.dtype) << " dp " << c.dp; }

std::string dist_case_name(const ::testing::TestParamInfo<DistCase>& info) {
  return std::string(info.param.type) + "_" + dtype_name(info.param.dtype) + "_dp" + std::to_string(info.param.dp);
}

class DistributedOptimizer : public ::testing::TestWithParam<DistCase> {};

// One DP rank's training steps: reduce_scatter, sharded step, all_gather.
RankResult run_rank(const DistCase& c, parallel::SimWorld& world, int rank) {
  omp_set_num_threads(1);
  auto dp = world.make_world_comm(rank);
  const GradBuckets buckets(kNumel, 5000, c.dp);  // 9 buckets of ~5000 elements
  Device dev(DeviceProfile{}, rank);
  RankResult out;
  out.params = initial_params(buckets.padded_numel(), c.dtype);
  {
    Optimizer opt(dev, test_ranges(), buckets.padded_numel(), c.dtype, make_config(c.type),
                  parallel::interval_pairs(buckets.owned(rank)));
    out.optimizer_bytes = optimizer_bytes(dev);
    opt.init_master_from(out.params.data());
    const parallel::Wire wire = parallel::Wire::of(c.dtype);
    for (int s = 0; s < kSteps; ++s) {
      std::vector<float> g = rank_grads(buckets.padded_numel(), s, rank);
      buckets.reduce_scatter(*dp, g.data());
      opt.step(out.params.data(), g.data(), kLrs[s], kScales[s]);
      buckets.all_gather(*dp, out.params.data(), wire);
    }
    for (auto& [name, t] : opt.state_tensors())
      out.states.emplace_back(name, std::vector<float>(t->data(), t->data() + t->numel()));
    out.intervals = opt.state_intervals();
  }
  return out;
}

TEST_P(DistributedOptimizer, EqualsUnshardedOptimizerOnSummedGrads) {
  const DistCase c = GetParam();
  // Reference: one unsharded optimizer on the rank-order sum of the DP grads.
  Device ref_dev(DeviceProfile{}, 0);
  Optimizer ref(ref_dev, test_ranges(), kNumel, c.dtype, make_config(c.type));
  std::vector<float> ref_params = initial_params(kNumel, c.dtype);
  ref.init_master_from(ref_params.data());
  for (int s = 0; s < kSteps; ++s)
    ref.step(ref_params.data(), summed_grads(kNumel, s, c.dp).data(), kLrs[s], kScales[s]);

  std::vector<RankResult> results(c.dp);
  parallel::SimWorld world(c.dp);
  world.run([&](int rank) { results[rank] = run_rank(c, world, rank); });

  int64_t owned_total = 0, bytes_total = 0;
  for (int r = 0; r < c.dp; ++r) {
    const RankResult& got = results[r];
    const std::vector<float> params(got.params.begin(), got.params.begin() + kNumel);
    ASSERT_EQ(params, ref_params) << "rank " << r << ": gathered params differ from the unsharded optimizer's";
    for (int64_t i = kNumel; i < static_cast<int64_t>(got.params.size()); ++i) ASSERT_EQ(got.params[i], 0.0f);
    ASSERT_EQ(got.states.size(), ref.state_tensors().size());
    for (const auto& [name, compact] : got.states) {
      const std::vector<float> flat = state_of(ref, name);
      int64_t k = 0;
      for (const auto& [begin, end] : got.intervals) {
        for (int64_t i = begin; i < end; ++i, ++k)
          ASSERT_EQ(compact[k], flat[i]) << name << " rank " << r << " element " << i;
      }
      ASSERT_EQ(k, static_cast<int64_t>(compact.size()));
    }
    for (const auto& [begin, end] : got.intervals) owned_total += end - begin;
    // Memory: about 1/dp of the unsharded states on every rank (the last rank
    // less: the uncovered tail, 2.3% of the buffer, falls in its chunks).
    const double share = static_cast<double>(got.optimizer_bytes) / static_cast<double>(optimizer_bytes(ref_dev));
    EXPECT_NEAR(share, 1.0 / c.dp, 0.03) << "rank " << r;
    bytes_total += got.optimizer_bytes;
  }
  EXPECT_EQ(owned_total, kCovered) << "the shards together cover every parameter once";
  EXPECT_EQ(bytes_total, Optimizer::state_bytes(kCovered, c.dtype, make_config(c.type)));
}

INSTANTIATE_TEST_SUITE_P(Cases, DistributedOptimizer,
                         ::testing::Values(DistCase{"adam", DType::kF32, 2}, DistCase{"adam", DType::kF32, 3},
                                           DistCase{"adam", DType::kF32, 4}, DistCase{"adam", DType::kBF16, 2},
                                           DistCase{"adam", DType::kBF16, 3}, DistCase{"adam", DType::kBF16, 4},
                                           DistCase{"sgd", DType::kF32, 3}, DistCase{"sgd", DType::kBF16, 4}),
                         dist_case_name);

TEST(ShardedOptimizer, EmptyShardIsTheUnshardedOptimizer) {
  Device dev(DeviceProfile{}, 0);
  Optimizer opt(dev, test_ranges(), kNumel, DType::kBF16, make_config("adam"), FlatIntervals{});
  EXPECT_FALSE(opt.sharded());
  EXPECT_EQ(opt.state_numel(), kNumel);
  EXPECT_EQ(opt.state_intervals(), (FlatIntervals{{0, kNumel}}));
  EXPECT_EQ(optimizer_bytes(dev), Optimizer::state_bytes(kNumel, DType::kBF16, make_config("adam")));
  Device plain_dev(DeviceProfile{}, 0);
  Optimizer plain(plain_dev, test_ranges(), kNumel, DType::kBF16, make_config("adam"));
  EXPECT_FALSE(plain.sharded());
  EXPECT_EQ(plain.state_intervals(), opt.state_intervals());
}

// Shard pieces out of order, crossing range boundaries and running past the
// buffer (DP padding): states cover exactly shard ∩ ranges, packed in order.
FlatIntervals odd_shard() { return {{39050, kNumel + 5}, {100, 20050}, {20050, 20060}}; }

TEST(ShardedOptimizer, StatesCoverShardIntersectRanges) {
  Device dev(DeviceProfile{}, 0);
  Optimizer opt(dev, test_ranges(), kNumel, DType::kF32, make_config("adam"), odd_shard());
  EXPECT_TRUE(opt.sharded());
  EXPECT_EQ(opt.state_intervals(), (FlatIntervals{{100, 20060}, {39050, 39100}}));
  EXPECT_EQ(opt.state_numel(), 19960 + 50);
  EXPECT_EQ(optimizer_bytes(dev), Optimizer::state_bytes(19960 + 50, DType::kF32, make_config("adam")));
  for (auto& [name, t] : opt.state_tensors()) EXPECT_EQ(t->numel(), opt.state_numel()) << name;
}

TEST(ShardedOptimizer, TouchesOnlyOwnedElements) {
  Device dev(DeviceProfile{}, 0);
  Optimizer opt(dev, test_ranges(), kNumel, DType::kBF16, make_config("adam"), odd_shard());
  std::vector<float> p = initial_params(kNumel, DType::kBF16);
  const std::vector<float> p0 = p;
  opt.init_master_from(p.data());
  EXPECT_EQ(opt.master()[0], p[100]) << "the master is compact: element 0 is flat element 100";
  EXPECT_EQ(opt.master()[19960], p[39050]);
  opt.step(p.data(), rank_grads(kNumel, 0, 0).data(), 1e-2);
  auto owned = [](int64_t i) { return (i >= 100 && i < 20060) || (i >= 39050 && i < 39100); };
  int64_t changed = 0;
  for (int64_t i = 0; i < kNumel; ++i) {
    if (!owned(i)) {
      ASSERT_EQ(p[i], p0[i]) << "element " << i << " is not owned";
    }
    changed += p[i] != p0[i];
  }
  EXPECT_GT(changed, 15000);
  std::vector<float> q(kNumel, -7.0f);
  opt.sync_params_from_master(q.data());
  for (int64_t i = 0; i < kNumel; ++i) ASSERT_EQ(q[i], owned(i) ? p[i] : -7.0f) << "element " << i;
}

TEST(ShardedOptimizer, RejectsBadShards) {
  Device dev(DeviceProfile{}, 0);
  const auto make = [&](FlatIntervals shard) {
    Optimizer(dev, test_ranges(), kNumel, DType::kF32, make_config("adam"), std::move(shard));
  };
  EXPECT_THROW(make({{-1, 10}}), Error);
  EXPECT_THROW(make({{10, 5}}), Error);
  EXPECT_THROW(make({{0, 10}, {20, 30}, {5, 12}}), Error);
  EXPECT_NO_THROW(make({{0, 10}, {10, 20}}));
  EXPECT_EQ(dev.stats().allocated, 0);
}

TEST(ShardedOptimizer, BitIdenticalForAnyThreadCount) {
  std::vector<float> results[2];
  for (int threads : {1, 2}) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    Device dev(DeviceProfile{}, 0);
    Optimizer opt(dev, test_ranges(), kNumel, DType::kBF16, make_config("adam"), odd_shard());
    std::vector<float> p = initial_params(kNumel, DType::kBF16);
    opt.init_master_from(p.data());
    for (int s = 0; s < kSteps; ++s) opt.step(p.data(), rank_grads(kNumel, s, 0).data(), kLrs[s]);
    results[threads - 1].assign(opt.master(), opt.master() + opt.state_numel());
    omp_set_num_threads(saved);
  }
  EXPECT_EQ(results[0], results[1]);
}

TEST(DistributedOptimizerMemory, Dp4HoldsAQuarterOfTheStates) {
  const int64_t n = int64_t{1} << 28;  // 256 Mi params, shape only
  const int dp = 4;
  const GradBuckets buckets(n, 0, dp);
  Device full_dev(DeviceProfile{}, 0);
  Optimizer full(full_dev, {{"w", 0, n, true}}, buckets.padded_numel(), DType::kBF16, make_config("adam"), true);
  const int64_t full_bytes = optimizer_bytes(full_dev);
  EXPECT_EQ(full_bytes, 12 * n);
  for (int r = 0; r < dp; ++r) {
    Device dev(DeviceProfile{}, r);
    Optimizer opt(dev, {{"w", 0, n, true}}, buckets.padded_numel(), DType::kBF16, make_config("adam"),
                  parallel::interval_pairs(buckets.owned(r)), true);
    EXPECT_EQ(optimizer_bytes(dev) * dp, full_bytes) << "rank " << r;
    EXPECT_EQ(opt.state_numel(), n / dp);
  }
}

}  // namespace
}  // namespace mtrain::optim
