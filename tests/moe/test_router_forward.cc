// The router's forward against the fp64 reference of Megatron's routing
// (router_reference.h): the gate GEMM, every score function / top-k /
// pre-softmax / scaling / expert-bias variant, the load-balancing and z-loss
// values; and the token-group reductions, by splitting every sequence over
// two simulated ranks (as sequence or context parallelism does).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "parallel/local_comm.h"
#include "parallel/sim_comm.h"
#include "profiler/kernel_region.h"
#include "router_test_util.h"
#include "test_util/fp32_bounds.h"

namespace mtrain::moe {
namespace {

using mtrain::testing::fp32_gamma;
using mtrain::testing::kFp32Unit;
using testing::base_config;
using testing::kFp64Unit;
using testing::make_problem;
using testing::run_router;

using Variant = testing::NamedConfig;

std::vector<Variant> variants() {
  std::vector<Variant> v;
  RouterConfig c = base_config();
  c.aux_loss_coeff = 1e-2;
  c.z_loss_coeff = 1e-3;
  v.push_back({"softmax_topk_then_softmax", c});
  c.pre_softmax = true;
  c.topk_scaling_factor = 2.5;
  v.push_back({"softmax_pre_scaled", c});
  c.topk = 1;
  c.topk_scaling_factor.reset();
  c.load_balancing = LoadBalancing::kSeqAuxLoss;
  v.push_back({"softmax_pre_top1_seq_aux", c});
  c = base_config();
  c.score_function = ScoreFunction::kSigmoid;
  c.topk = 3;
  c.aux_loss_coeff = 1e-2;
  c.topk_scaling_factor = 1.5;
  v.push_back({"sigmoid_top3_scaled", c});
  c.topk = 1;
  c.load_balancing = LoadBalancing::kSeqAuxLoss;
  v.push_back({"sigmoid_top1_seq_aux", c});
  c.topk = 2;
  c.enable_expert_bias = true;
  c.load_balancing = LoadBalancing::kAuxLoss;
  v.push_back({"sigmoid_expert_bias", c});
  return v;
}

// The gate: logits within gamma_C * sum_c |x W| of the exact x · W^T.
void expect_logits(const testing::Problem& p, const RouterForward& fwd) {
  const int64_t N = p.tokens(), C = p.cfg.hidden, E = p.cfg.num_experts;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t e = 0; e < E; ++e) {
      double exact = 0, l1 = 0;
      for (int64_t c = 0; c < C; ++c) {
        exact += double{p.x[n * C + c]} * p.w[e * C + c];
        l1 += std::fabs(double{p.x[n * C + c]} * p.w[e * C + c]);
      }
      ASSERT_LE(std::fabs(fwd.logits[n * E + e] - exact), fp32_gamma(C) * l1) << n << "," << e;
    }
}

TEST(RouterForward, MatchesMegatronReferenceForEveryScoreVariant) {
  for (const Variant& v : variants()) {
    SCOPED_TRACE(v.name);
    const testing::Problem p = make_problem(v.cfg, 11);
    const auto run = run_router(p);
    expect_logits(p, run.fwd);
    // The reference routes mtrain's own fp32 logits, so the comparison sees
    // only the score function's roundings: mtrain computes in double and
    // rounds an fp32 score, a sigmoid sum and the scaled prob once each, so
    // every prob is within 4u of the exact value.
    const int64_t N = p.tokens(), E = v.cfg.num_experts, k = v.cfg.topk;
    std::vector<double> logits(run.fwd.logits.begin(), run.fwd.logits.end());
    std::vector<double> bias(p.bias.begin(), p.bias.end());
    const auto ref = testing::ref_router(testing::to_megatron_order(logits, p.batch, p.seq, E), p.batch, p.seq, v.cfg,
                                         v.cfg.enable_expert_bias ? &bias : nullptr);
    std::vector<int64_t> per_expert(E, 0);
    for (int64_t n = 0; n < N; ++n) {
      const int64_t m = testing::megatron_index(n, p.batch, p.seq);
      double previous = INFINITY;
      for (int64_t j = 0; j < k; ++j) {
        const int e = run.fwd.expert_ids[n * k + j];
        ASSERT_TRUE(ref.map[m * E + e]) << "token " << n << " routed to expert " << e;
        const double want = ref.probs[m * E + e];
        EXPECT_LE(std::fabs(run.fwd.probs[n * k + j] - want), 4 * kFp32Unit * want) << n << "," << j;
        EXPECT_EQ(run.fwd.kept[n * k + j], 1);
        if (!v.cfg.enable_expert_bias) {
          EXPECT_LE(want, previous) << "top-k order";  // highest first
        }
        previous = want;
        ++per_expert[e];
      }
    }
    for (int64_t e = 0; e < E; ++e) EXPECT_EQ(run.fwd.tokens_per_expert[e], per_expert[e]);
    EXPECT_EQ(run.expert_counts, std::vector<float>(per_expert.begin(), per_expert.end()));
    // Loss values: sums of positive terms whose scores carry <= 3 fp32
    // roundings (the rest is double): relative 4u. z: double throughout.
    const bool seq = v.cfg.load_balancing == LoadBalancing::kSeqAuxLoss;
    const auto& lb = seq ? run.fwd.losses.seq_load_balancing_loss : run.fwd.losses.load_balancing_loss;
    ASSERT_TRUE(lb.has_value());
    EXPECT_FALSE((seq ? run.fwd.losses.load_balancing_loss : run.fwd.losses.seq_load_balancing_loss).has_value());
    EXPECT_LE(std::fabs(*lb - ref.load_balancing), 4 * kFp32Unit * ref.load_balancing);
    ASSERT_EQ(run.fwd.losses.z_loss.has_value(), v.cfg.z_loss_coeff.has_value());
    if (v.cfg.z_loss_coeff) {
      EXPECT_LE(std::fabs(*run.fwd.losses.z_loss - ref.z), 4 * (N + E) * kFp64Unit * ref.z);
    }
  }
}

TEST(RouterForward, ExpertBiasMovesTheSelectionButNotTheWeights) {
  RouterConfig c = base_config();
  c.score_function = ScoreFunction::kSigmoid;
  c.enable_expert_bias = true;
  testing::Problem p = make_problem(c, 5);
  const auto unbiased = run_router(p);
  // A large bias on expert 0 puts it in every token's top-2, with the weight
  // of its own unbiased sigmoid score.
  std::fill(p.bias.begin(), p.bias.end(), 0.f);
  p.bias[0] = 10.f;
  const auto biased = run_router(p);
  int changed = 0;
  for (int64_t n = 0; n < p.tokens(); ++n) {
    const int32_t* ids = biased.fwd.expert_ids.data() + n * 2;
    ASSERT_EQ(ids[0], 0);
    const double s0 = testing::ref_sigmoid(biased.fwd.logits[n * 6 + 0]);
    const double s1 = testing::ref_sigmoid(biased.fwd.logits[n * 6 + ids[1]]);
    EXPECT_LE(std::fabs(biased.fwd.probs[n * 2] - s0 / (s0 + s1)), 4 * kFp32Unit);
    changed += unbiased.fwd.expert_ids[n * 2] != 0 && unbiased.fwd.expert_ids[n * 2 + 1] != 0;
  }
  EXPECT_GT(changed, 0) << "the bias should have changed some selections";
}

TEST(RouterForward, EvaluationComputesNoLossesAndCountsNothing) {
  RouterConfig c = base_config();
  c.aux_loss_coeff = 1e-2;
  c.z_loss_coeff = 1e-3;
  const testing::Problem p = make_problem(c, 3);
  parallel::SelfComm self;
  RouterForward fwd;
  std::vector<float> counts(6, 0.f);
  router_forward(fwd, counts.data(), p.x.data(), p.w.data(), nullptr, {p.batch, p.seq}, c, false, self);
  EXPECT_FALSE(fwd.losses.load_balancing_loss || fwd.losses.z_loss || fwd.aux_active || fwd.z_active);
  EXPECT_EQ(counts, std::vector<float>(6, 0.f));
}

// Above the parallel threshold (N * E > 2^15) tokens are routed by several
// threads: each token's result is still exactly the one it gets alone.
TEST(RouterForward, LargeBatchRoutesEveryTokenAsAlone) {
  RouterConfig c = base_config();
  c.num_experts = 16;
  c.score_function = ScoreFunction::kSigmoid;
  c.aux_loss_coeff = 1e-2;
  c.z_loss_coeff = 1e-3;
  const testing::Problem big = make_problem(c, 13, 4, 1024);
  const auto all = run_router(big);
  testing::Problem few = big;
  few.batch = 1;
  few.seq = 5;
  few.x.resize(5 * c.hidden);
  const auto alone = run_router(few);
  for (int64_t i = 0; i < 5 * c.topk; ++i) {
    EXPECT_EQ(all.fwd.expert_ids[i], alone.fwd.expert_ids[i]);
    EXPECT_EQ(all.fwd.probs[i], alone.fwd.probs[i]);
  }
}

// A dry run: the gate GEMM and the routing pass are priced, no data is
// touched; the load-balancing loss's sum of the tokens per expert over the
// token group is made as in a real run (on nothing), once per training forward.
TEST(RouterForward, ShapeOnlyRoutesNothing) {
  RouterConfig c = base_config();
  c.aux_loss_coeff = 1e-2;
  parallel::MetaComm group("tp", 0, 2);
  std::vector<int64_t> sums;
  group.set_observer([&](const parallel::CommEvent& e) {
    if (e.op == parallel::CommOp::kAllReduce) sums.push_back(e.elements);
  });
  RouterForward fwd;
  profiler::ShapeOnlyScope shape_only;
  router_forward(fwd, nullptr, nullptr, nullptr, nullptr, {2, 1024}, c, true, group);
  router_backward(nullptr, nullptr, nullptr, nullptr, fwd, nullptr, nullptr, c, 1.f);
  EXPECT_EQ(fwd.num_tokens, 2048);
  EXPECT_TRUE(fwd.logits.empty());
  EXPECT_FALSE(fwd.losses.load_balancing_loss.has_value());
  EXPECT_EQ(sums, std::vector<int64_t>{c.num_experts});
  router_forward(fwd, nullptr, nullptr, nullptr, nullptr, {2, 1024}, c, /*training=*/false, group);
  EXPECT_EQ(sums.size(), 1u) << "no loss in evaluation";
}

// The micro-batch's tokens on two simulated ranks of a token group: the
// load-balancing shares sum to the single-rank loss, the z-loss values
// average to it, and the gate gradients (dW summed over the group, as for
// Megatron's sequence-parallel router weight) equal the single-rank ones.
// `split`: every sequence halved (Megatron's SP / CP), or the flattened
// tokens cut in two contiguous shards (mtrain's SP), which cuts a sequence.
enum class Split { kEverySequence, kContiguous };

void expect_group_equals_single_rank(const RouterConfig& cfg, Split split) {
  const testing::Problem p = make_problem(cfg, 21, 3, 8);
  const auto whole = run_router(p);
  const int64_t C = cfg.hidden, E = cfg.num_experts, N = p.tokens(), half = p.seq / 2;
  std::vector<std::vector<int64_t>> held(2);  // global token of each local token
  std::vector<RouterTokens> layout(2);
  for (int r = 0; r < 2; ++r) {
    if (split == Split::kEverySequence) {
      for (int64_t b = 0; b < p.batch; ++b)
        for (int64_t s = r * half; s < (r + 1) * half; ++s) held[r].push_back(b * p.seq + s);
      layout[r] = {p.batch, half};
    } else {
      for (int64_t n = r * N / 2; n < (r + 1) * N / 2; ++n) held[r].push_back(n);
      layout[r] = {p.batch, p.seq, r * N / 2, N / 2};
    }
  }
  std::vector<testing::MtrainRun> runs(2);
  parallel::SimWorld world(2);
  world.run([&](int rank) {
    auto group = world.make_comm("tp_cp", {0, 1}, rank);
    std::vector<float> x;
    std::vector<double> up;
    for (int64_t n : held[rank]) {
      x.insert(x.end(), p.x.begin() + n * C, p.x.begin() + (n + 1) * C);
      up.insert(up.end(), p.up.begin() + n * E, p.up.begin() + (n + 1) * E);
    }
    runs[rank] = run_router(p, *group, x.data(), layout[rank], up);
  });
  const bool seq = cfg.load_balancing == LoadBalancing::kSeqAuxLoss;
  auto lb = [&](const testing::MtrainRun& r) {
    return *(seq ? r.fwd.losses.seq_load_balancing_loss : r.fwd.losses.load_balancing_loss);
  };
  // Positive terms, <= 4u each (see above), plus one double addition.
  EXPECT_LE(std::fabs(lb(runs[0]) + lb(runs[1]) - lb(whole)), 8 * kFp32Unit * lb(whole));
  const double z = (*runs[0].fwd.losses.z_loss + *runs[1].fwd.losses.z_loss) / 2;
  EXPECT_LE(std::fabs(z - *whole.fwd.losses.z_loss), 8 * (N + E) * kFp64Unit * z);
  // Two fp32 evaluations of the same gradient (GEMMs of other sizes).
  const double rtol = testing::gradient_rtol(p);
  std::vector<float> dw(E * C), dx(N * C);
  for (int64_t i = 0; i < E * C; ++i) dw[i] = runs[0].dw[i] + runs[1].dw[i];
  EXPECT_TRUE(mtrain::testing::close_in_max_norm(dw.data(), whole.dw.data(), dw.size(), rtol));
  for (int r = 0; r < 2; ++r)
    for (size_t i = 0; i < held[r].size(); ++i) std::copy_n(runs[r].dx.begin() + i * C, C, dx.begin() + held[r][i] * C);
  EXPECT_TRUE(mtrain::testing::close_in_max_norm(dx.data(), whole.dx.data(), dx.size(), rtol));
}

TEST(RouterForward, TokenGroupSharesAddUpToTheWholeMicroBatch) {
  RouterConfig c = base_config();
  c.aux_loss_coeff = 1e-2;
  c.z_loss_coeff = 1e-3;
  for (Split split : {Split::kEverySequence, Split::kContiguous}) {
    SCOPED_TRACE(split == Split::kContiguous ? "contiguous shards" : "every sequence split");
    c.load_balancing = LoadBalancing::kAuxLoss;
    c.score_function = ScoreFunction::kSoftmax;
    {
      SCOPED_TRACE("aux_loss");
      expect_group_equals_single_rank(c, split);
    }
    c.load_balancing = LoadBalancing::kSeqAuxLoss;
    c.score_function = ScoreFunction::kSigmoid;
    {
      SCOPED_TRACE("seq_aux_loss");
      expect_group_equals_single_rank(c, split);
    }
  }
}

}  // namespace
}  // namespace mtrain::moe
