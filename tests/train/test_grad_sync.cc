// GradSync over the gradient regions (grad_regions.h) on a SimWorld of 4
// with a synthetic ParamStore: dense parameters summed over dp (dp-cp with
// context parallelism), parameters flagged expert_parallel over expt-dp;
// the distributed optimizer's shards, the gathered parameters and the grad
// norm against references computed by hand. Gradients are small integers,
// so every sum is exact and the checks are bit-for-bit.
//
// The groups, written out from Megatron's RankGenerator (order tp-cp-ep-dp-pp):
// world 4, TP 1, EP 2, ETP 1 gives the expert grid ep stride 1, dp stride 2,
// so ep = {0,1},{2,3} and expt-dp = {0,2},{1,3}; the dense dp (CP 1) or
// dp-cp (CP 2, DP 2) group is {0,1,2,3}.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <mutex>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "device/device.h"
#include "model/params.h"
#include "optim/optimizer.h"
#include "parallel/sim_comm.h"
#include "test_util/bf16_reference.h"
#include "train/grad_regions.h"
#include "train/grad_sync.h"
#include "train/trainer.h"

namespace mtrain::train {
namespace {

using mtrain::testing::bf16_reference;

constexpr int kWorld = 4;
constexpr int64_t kBucketElems = 8;  // several buckets per region
const std::vector<std::vector<int>> kExpertDpPeers = {{0, 2}, {1, 3}, {0, 2}, {1, 3}};

struct Param {
  const char* name;
  int64_t numel;
  bool expert;
};
// Registration order mixes dense and expert parameters (as an MoE layer would).
const std::vector<Param> kParams = {
    {"dense.a", 10, false}, {"expert.w", 7, true}, {"dense.b", 21, false}, {"expert.v", 3, true}};

float grad_of(int rank, size_t param, int64_t j) { return static_cast<float>((rank + 1) * (param + 1) + j % 5); }
// Dense parameters start equal everywhere; an expert differs between EP ranks.
float init_of(int rank, size_t param, int64_t j) {
  return kParams[param].expert ? static_cast<float>(1000 * (rank % 2 + 1) + j) : static_cast<float>(100 + j);
}
// The gradient a rank holds after the reduction: the sum over its group.
float reduced_of(int rank, size_t param, int64_t j) {
  float sum = 0;
  if (kParams[param].expert) {
    for (int peer : kExpertDpPeers[rank]) sum += grad_of(peer, param, j);
  } else {
    for (int peer = 0; peer < kWorld; ++peer) sum += grad_of(peer, param, j);
  }
  return sum;
}

parallel::ProcessGrid make_grid(int cp, int ep) {
  parallel::ProcessGridConfig c;
  c.world_size = kWorld;
  c.context_parallel_size = cp;
  c.expert_model_parallel_size = ep;
  c.expert_tensor_parallel_size = 1;
  return parallel::ProcessGrid(c);
}

model::ParamStore make_store(device::Device& dev, const parallel::ProcessGrid& grid, bool with_experts) {
  model::ParamStore ps;
  for (const Param& p : kParams) {
    const int i = ps.add(p.name, {p.numel}, true, model::Init::kZeros);
    ps.mutable_info(i).expert_parallel = with_experts && p.expert;
  }
  ps.finalize(dev, DType::kF32, false, lay_out_grad_regions(ps, grid, kBucketElems));
  return ps;
}

struct Case {
  int cp;
  bool distributed;
  bool overlap;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << "cp " << c.cp << (c.distributed ? ", distributed optimizer" : "") << (c.overlap ? ", overlap" : "");
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return "cp" + std::to_string(info.param.cp) + (info.param.distributed ? "_distopt" : "") +
         (info.param.overlap ? "_overlap" : "");
}

class GradSyncExpertRegions : public ::testing::TestWithParam<Case> {};

// Reduce, (sharded) SGD step with lr 0.5, gather: every rank ends with
// init - 0.5 * (its group's gradient sum), the grad norm counts each
// expert shard once, and the buckets of each region run over its group.
TEST_P(GradSyncExpertRegions, ReduceStepAndGatherEqualTheHandReference) {
  const Case k = GetParam();
  const parallel::ProcessGrid grid = make_grid(k.cp, 2);
  parallel::SimWorld world(kWorld);
  std::mutex mu;
  std::map<int, FlatIntervals> shards;  // rank -> updated()
  std::vector<double> norms(kWorld);
  int64_t expert_begin = 0;
  world.run([&](int rank) {
    device::Device dev(device::DeviceProfile{}, rank);
    model::ParamStore ps = make_store(dev, grid, true);
    EXPECT_GE(ps.expert_begin(), (ps.dense_numel() + 3) / 4 * 4) << "room for the dense padding";
    for (size_t i = 0; i < kParams.size(); ++i) {
      EXPECT_EQ(ps.info(static_cast<int>(i)).offset >= ps.expert_begin(), kParams[i].expert) << kParams[i].name;
      for (int64_t j = 0; j < kParams[i].numel; ++j) {
        ps.grad(static_cast<int>(i))[j] = grad_of(rank, i, j);
        ps.param(static_cast<int>(i))[j] = init_of(rank, i, j);
      }
    }
    parallel::ParallelState state = parallel::make_sim_parallel_state(grid, world, rank);
    std::map<std::string, int64_t> reduced;  // group -> elements reduced
    state.set_observer([&](const parallel::CommEvent& e) {
      const bool bucket = e.op == (k.distributed ? parallel::CommOp::kReduceScatter : parallel::CommOp::kAllReduce);
      if (bucket) reduced[std::string(e.group)] += e.elements;
    });
    GradSync sync(ps, state, k.distributed, kBucketElems, k.overlap);
    if (k.overlap) {
      sync.begin_overlap(ps.grads().data());
      for (int i = static_cast<int>(kParams.size()) - 1; i >= 0; --i)
        sync.mark_ready(ps.info(i).offset, ps.info(i).offset + ps.info(i).numel);
    }
    sync.reduce(ps.grads().data());
    state.set_observer(nullptr);
    const std::string dense_group = k.cp > 1 ? "dp-cp" : "dp";
    EXPECT_EQ(reduced[dense_group], (ps.dense_numel() + 3) / 4 * 4);
    EXPECT_EQ(reduced["expt-dp"], (ps.unpadded_numel() - ps.expert_begin() + 1) / 2 * 2);
    EXPECT_EQ(reduced.size(), 2u);
    const double norm = sync.grad_norm(ps.grads().data());
    optim::OptimizerConfig cfg;
    cfg.type = "sgd";
    cfg.sgd_momentum = 0;
    cfg.weight_decay = 0;
    optim::Optimizer opt(dev, optimizer_ranges(ps), ps.numel(), DType::kF32, cfg,
                         GradSync::optimizer_shard(ps, state, k.distributed, kBucketElems));
    opt.step(ps.params().data(), ps.grads().data(), 0.5);
    sync.gather_params(ps.params().data());
    int64_t wrong = 0;
    for (size_t i = 0; i < kParams.size(); ++i) {
      for (int64_t j = 0; j < kParams[i].numel; ++j) {
        const float want = init_of(rank, i, j) - 0.5f * reduced_of(rank, i, j);
        wrong += ps.param(static_cast<int>(i))[j] != want;
      }
    }
    EXPECT_EQ(wrong, 0) << "rank " << rank;
    std::lock_guard lk(mu);
    shards[rank] = sync.updated();
    norms[rank] = norm;
    expert_begin = ps.expert_begin();
  });
  // The norm: every dense element once, each expert shard (EP rank) once.
  double sq = 0;
  for (size_t i = 0; i < kParams.size(); ++i) {
    for (int64_t j = 0; j < kParams[i].numel; ++j) {
      const int holders = kParams[i].expert ? 2 : 1;  // ranks 0 and 1 hold the two EP shards
      for (int r = 0; r < holders; ++r) sq += std::pow(static_cast<double>(reduced_of(r, i, j)), 2);
    }
  }
  for (int r = 0; r < kWorld; ++r) EXPECT_NEAR(norms[r], std::sqrt(sq), 1e-12 * std::sqrt(sq)) << r;
  // Sharded: the dense region's shards tile it over all 4 ranks, the expert
  // region's over each expt-dp pair.
  if (k.distributed) {
    for (const std::vector<int>& group : {std::vector<int>{0, 1, 2, 3}, std::vector<int>{0, 2}}) {
      std::set<int64_t> seen;
      int64_t covered = 0;
      for (int r : group) {
        for (const auto& [b, e] : shards[r]) {
          const bool in_expert = group.size() == 2;
          for (int64_t x = b; x < e; ++x) {
            if ((x >= expert_begin) != in_expert) continue;
            EXPECT_TRUE(seen.insert(x).second) << x;
            ++covered;
          }
        }
      }
      EXPECT_GT(covered, 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GradSyncExpertRegions,
                         ::testing::Values(Case{1, false, false}, Case{1, true, false}, Case{1, false, true},
                                           Case{1, true, true}, Case{2, false, false}, Case{2, true, true}),
                         case_name);

// Context parallelism without experts: parameters replicated over CP are
// summed over dp-cp (all 4 ranks at CP 2, DP 2), not over dp alone.
TEST(GradSyncContextParallel, DenseGradientsSumOverDpCp) {
  const parallel::ProcessGrid grid = make_grid(2, 1);
  for (const bool distributed : {false, true}) {
    parallel::SimWorld world(kWorld);
    world.run([&](int rank) {
      device::Device dev(device::DeviceProfile{}, rank);
      model::ParamStore ps = make_store(dev, grid, false);
      EXPECT_FALSE(ps.has_expert_params());
      for (size_t i = 0; i < kParams.size(); ++i)
        for (int64_t j = 0; j < kParams[i].numel; ++j) ps.grad(static_cast<int>(i))[j] = grad_of(rank, i, j);
      parallel::ParallelState state = parallel::make_sim_parallel_state(grid, world, rank);
      GradSync sync(ps, state, distributed, kBucketElems);
      sync.reduce(ps.grads().data());
      int64_t wrong = 0, checked = 0;
      for (const auto& [b, e] : sync.updated()) {
        for (size_t i = 0; i < kParams.size(); ++i) {
          const model::ParamInfo& p = ps.info(static_cast<int>(i));
          for (int64_t j = std::max<int64_t>(0, b - p.offset); j < std::min(p.numel, e - p.offset); ++j) {
            float sum = 0;
            for (int peer = 0; peer < kWorld; ++peer) sum += grad_of(peer, i, j);
            wrong += ps.grad(static_cast<int>(i))[j] != sum;
            ++checked;
          }
        }
      }
      EXPECT_EQ(wrong, 0) << "rank " << rank << (distributed ? " distributed" : "");
      EXPECT_GT(checked, 0);
    });
  }
}

// --grad_reduce_in_bf16 (Megatron's bf16 main grads): the gradient buffer
// takes 2 bytes a parameter on the device, every reduction moves 2 bytes an
// element, and each DP sum is rounded to bf16. Gradients of the form
// 1 + m / 128 are bf16 values whose sum over 4 ranks is exact in fp32 but
// not in bf16: the reduced value must be the bf16 rounding of the exact sum.
TEST(GradSyncBf16, SumsMoveAndLandInBf16) {
  const parallel::ProcessGrid grid = make_grid(1, 1);
  auto g = [](int rank, int64_t k) { return 1.0f + static_cast<float>((rank * 37 + k * 11) % 128) / 128.0f; };
  for (const bool distributed : {false, true}) {
    parallel::SimWorld world(kWorld);
    world.run([&](int rank) {
      device::Device dev(device::DeviceProfile{}, rank);
      model::ParamStore ps;
      for (const Param& p : kParams) ps.add(p.name, {p.numel}, true, model::Init::kZeros);
      ps.finalize(dev, DType::kBF16, false, lay_out_grad_regions(ps, grid, kBucketElems), DType::kBF16);
      EXPECT_EQ(dev.stats().by_category[static_cast<int>(device::MemCategory::kGrads)], 2 * ps.numel());
      for (int64_t k = 0; k < ps.unpadded_numel(); ++k) ps.grads().data()[k] = g(rank, k);
      parallel::ParallelState state = parallel::make_sim_parallel_state(grid, world, rank);
      int64_t elements = 0, bytes = 0;
      state.set_observer([&](const parallel::CommEvent& e) {
        elements += e.elements;
        bytes += e.bytes;
      });
      GradSync sync(ps, state, distributed, kBucketElems, false, false, {}, DType::kBF16);
      sync.reduce(ps.grads().data());
      state.set_observer(nullptr);
      EXPECT_GT(elements, 0);
      EXPECT_EQ(bytes, 2 * elements) << "bf16 on the wire";
      int64_t wrong = 0, inexact = 0;
      for (const auto& [b, e] : sync.updated()) {
        for (int64_t k = b; k < std::min(e, ps.unpadded_numel()); ++k) {
          double exact = 0;
          for (int peer = 0; peer < kWorld; ++peer) exact += g(peer, k);
          wrong += ps.grads().data()[k] != static_cast<float>(bf16_reference(exact));
          inexact += bf16_reference(exact) != exact;
        }
      }
      EXPECT_EQ(wrong, 0) << "rank " << rank << (distributed ? " distributed" : "");
      EXPECT_GT(inexact, 0) << "the case rounds";
    });
  }
}

}  // namespace
}  // namespace mtrain::train
