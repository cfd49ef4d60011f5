// Capacity dropping and the expert-bias update on small examples whose
// expected results are derived by hand from Megatron's code (the derivation
// is in each comment). Logits are set exactly through an identity gate:
// C = E and W = I, so logits = x.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "moe/router.h"
#include "parallel/local_comm.h"
#include "parallel/sim_comm.h"

namespace mtrain::moe {
namespace {

struct Routed {
  RouterForward fwd;
  std::vector<float> counts;
};

// Routes tokens whose logits are `logits` (N, E) in mtrain order (b, s).
Routed route(const RouterConfig& cfg, const std::vector<float>& logits, int64_t batch, int64_t seq) {
  const int64_t E = cfg.num_experts;
  std::vector<float> eye(E * E, 0.f);
  for (int64_t e = 0; e < E; ++e) eye[e * E + e] = 1.f;
  RouterConfig c = cfg;
  c.hidden = E;
  parallel::SelfComm self;
  Routed r;
  r.counts.assign(E, 0.f);
  router_forward(r.fwd, r.counts.data(), logits.data(), eye.data(), nullptr, {batch, seq}, c, true, self);
  return r;
}

// Two experts, top-1 with pre-softmax: token t goes to expert 0 with
// probability p_t = sigmoid(l0 - l1); here l1 = 0, l0 = log(p / (1 - p)).
std::vector<float> two_expert_logits(const std::vector<double>& p0) {
  std::vector<float> l;
  for (double p : p0) {
    l.push_back(static_cast<float>(std::log(p / (1 - p))));
    l.push_back(0.f);
  }
  return l;
}

RouterConfig top1_two_experts(double factor, DropPolicy policy) {
  RouterConfig c;
  c.num_experts = 2;
  c.topk = 1;
  c.pre_softmax = true;
  c.capacity_factor = factor;
  c.drop_policy = policy;
  return c;
}

TEST(RouterCapacity, ExpertCapacityIsMegatronsGetCapacity) {
  // ceil((num_tokens * topk / E) * factor)
  EXPECT_EQ(expert_capacity(10, 4, 2, 1.0), 5);  // 20/4 = 5
  EXPECT_EQ(expert_capacity(10, 4, 2, 1.1), 6);  // 5 * 1.1 = 5.5 -> 6
  EXPECT_EQ(expert_capacity(4, 2, 1, 1.0), 2);   // 2
  EXPECT_EQ(expert_capacity(3, 4, 1, 1.0), 1);   // 0.75 -> 1
  EXPECT_EQ(expert_capacity(16, 8, 2, 0.0), 0);  // everything dropped
  EXPECT_EQ(expert_capacity(12, 6, 2, 0.7), 3);  // 4 * 0.7 = 2.8 -> 3
}

// Four tokens (one sequence), all preferring expert 0 with p = 0.6, 0.9,
// 0.7, 0.8. Capacity = ceil(4 * 1 / 2 * 1.0) = 2 < 4 tokens, so Megatron
// takes top-2 of expert 0's column of routing_probs (0.6, 0.9, 0.7, 0.8):
// tokens 1 and 3 are kept, 0 and 2 dropped (prob 0). Expert 1's column is
// all zeros: nothing to drop.
TEST(RouterCapacity, ProbsPolicyKeepsTheMostProbableTokens) {
  const auto r = route(top1_two_experts(1.0, DropPolicy::kProbs), two_expert_logits({0.6, 0.9, 0.7, 0.8}), 1, 4);
  EXPECT_EQ(r.fwd.capacity, 2);
  EXPECT_EQ(r.fwd.expert_ids, (std::vector<int32_t>{0, 0, 0, 0}));
  EXPECT_EQ(r.fwd.kept, (std::vector<uint8_t>{0, 1, 0, 1}));
  EXPECT_EQ(r.fwd.probs[0], 0.f);
  EXPECT_EQ(r.fwd.probs[2], 0.f);
  EXPECT_NEAR(r.fwd.probs[1], 0.9, 1e-6);
  EXPECT_NEAR(r.fwd.probs[3], 0.8, 1e-6);
  EXPECT_EQ(r.fwd.tokens_per_expert, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(r.counts, (std::vector<float>{2.f, 0.f}));  // routing_map after dropping
}

// Same tokens, position policy: Megatron takes top-2 of the 0/1 routing-map
// column, i.e. (by its intent, "tokens at the end are dropped") the first
// two tokens: 0 and 1 kept, 2 and 3 dropped.
TEST(RouterCapacity, PositionPolicyKeepsTheEarliestTokens) {
  const auto r = route(top1_two_experts(1.0, DropPolicy::kPosition), two_expert_logits({0.6, 0.9, 0.7, 0.8}), 1, 4);
  EXPECT_EQ(r.fwd.kept, (std::vector<uint8_t>{1, 1, 0, 0}));
}

// Position order is Megatron's [s, b] order: with 2 sequences of 2 tokens,
// mtrain's tokens n = (b, s) = 0:(0,0) 1:(0,1) 2:(1,0) 3:(1,1) are Megatron's
// tokens m = s * 2 + b = 0, 2, 1, 3. Capacity 2 keeps Megatron's m = 0 and 1:
// the first position of each sequence, mtrain's n = 0 and 2.
TEST(RouterCapacity, PositionOrderIsSequencePositionFirst) {
  const auto r = route(top1_two_experts(1.0, DropPolicy::kPosition), two_expert_logits({0.6, 0.9, 0.7, 0.8}), 2, 2);
  EXPECT_EQ(r.fwd.kept, (std::vector<uint8_t>{1, 0, 1, 0}));
}

// pad_to_capacity: Megatron's routing_map becomes the capacity mask (top-2 of
// each column, including zero-prob tokens), so each expert's column holds
// exactly `capacity` = 2 tokens and the bias counts are 2 and 2; the kept
// routings are the same as without padding.
TEST(RouterCapacity, PaddingCountsCapacityTokensPerExpert) {
  RouterConfig c = top1_two_experts(1.0, DropPolicy::kProbs);
  c.pad_to_capacity = true;
  const auto r = route(c, two_expert_logits({0.6, 0.9, 0.7, 0.8}), 1, 4);
  EXPECT_EQ(r.fwd.kept, (std::vector<uint8_t>{0, 1, 0, 1}));
  EXPECT_EQ(r.counts, (std::vector<float>{2.f, 2.f}));
}

// Capacity >= tokens: ceil(4 * 1 / 2 * 2.5) = 5 > 4, Megatron builds an
// all-ones capacity mask: nothing dropped.
TEST(RouterCapacity, NoDroppingWhenCapacityExceedsTheTokens) {
  const auto r = route(top1_two_experts(2.5, DropPolicy::kProbs), two_expert_logits({0.6, 0.9, 0.7, 0.8}), 1, 4);
  EXPECT_EQ(r.fwd.capacity, 5);
  EXPECT_EQ(r.fwd.kept, (std::vector<uint8_t>{1, 1, 1, 1}));
}

// Top-2 of 3 experts, 3 tokens, capacity ceil(3 * 2 / 3 * 0.5) = 1. Logits
// (softmax after top-k): token 0 [2, 1, 0] -> experts 0 (p .731), 1 (.269);
// token 1 [0, 3, 1] -> 1 (.881), 2 (.119); token 2 [1, 0, 2] -> 2 (.731), 0 (.269).
// Columns of routing_probs: expert 0 (.731, 0, .269) keeps token 0; expert 1
// (.269, .881, 0) keeps token 1; expert 2 (0, .119, .731) keeps token 2.
// So each token keeps its first choice and loses its second.
TEST(RouterCapacity, TopTwoProbsPolicyPerExpertColumn) {
  RouterConfig c;
  c.num_experts = 3;
  c.topk = 2;
  c.capacity_factor = 0.5;
  const auto r = route(c, {2, 1, 0, 0, 3, 1, 1, 0, 2}, 1, 3);
  EXPECT_EQ(r.fwd.capacity, 1);
  EXPECT_EQ(r.fwd.expert_ids, (std::vector<int32_t>{0, 1, 1, 2, 2, 0}));
  EXPECT_EQ(r.fwd.kept, (std::vector<uint8_t>{1, 0, 1, 0, 1, 0}));
  EXPECT_EQ(r.fwd.tokens_per_expert, (std::vector<int64_t>{1, 1, 1}));
}

// get_updated_expert_bias: counts [5, 1, 3, 3], mean 3, offsets
// mean - counts = [-2, 2, 0, 0], bias += rate * sign = [-r, +r, 0, 0].
TEST(ExpertBias, UpdateMovesTowardsBalance) {
  std::vector<float> bias = {0.5f, 0.f, -0.25f, 1.f}, counts = {5, 1, 3, 3};
  parallel::SelfComm self;
  expert_bias_update(bias.data(), counts.data(), 1, 4, 1e-3, self);
  const float r = 1e-3f;
  EXPECT_EQ(bias, (std::vector<float>{0.5f - r, 0.f + r, -0.25f, 1.f}));
  EXPECT_EQ(counts, std::vector<float>(4, 0.f));
}

// Counts are summed over TP x DP x CP first: rank 0 [5, 1, 3, 3] + rank 1
// [0, 4, 3, 1] = [5, 5, 6, 4], mean 5: offsets [0, 0, -1, 1]; two stacked
// layers (rows) in one call: layer 1 counts [2, 2, 2, 2] on each rank are
// balanced, its bias stays.
TEST(ExpertBias, CountsAreSummedOverTheGroup) {
  parallel::SimWorld world(2);
  std::vector<std::vector<float>> bias(2, std::vector<float>(8, 0.f));
  world.run([&](int rank) {
    auto group = world.make_comm("tp_dp_cp", {0, 1}, rank);
    std::vector<float> counts =
        rank == 0 ? std::vector<float>{5, 1, 3, 3, 2, 2, 2, 2} : std::vector<float>{0, 4, 3, 1, 2, 2, 2, 2};
    expert_bias_update(bias[rank].data(), counts.data(), 2, 4, 0.01, *group);
  });
  const float r = 0.01f;
  for (int rank = 0; rank < 2; ++rank) EXPECT_EQ(bias[rank], (std::vector<float>{0, 0, -r, r, 0, 0, 0, 0})) << rank;
}

}  // namespace
}  // namespace mtrain::moe
