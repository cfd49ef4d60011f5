// Aux-loss-free balancing in the model (--moe_router_enable_expert_bias):
// the routing counts of a step's training forwards (each micro-batch once,
// also under full recompute; evaluation adds nothing) move each MoE layer's
// expert_bias by rate * sign(mean - count), checked against an fp64
// re-computation from the dumped counts over a few steps; the bias is a
// buffer (Megatron's register_buffer): no gradient, not a parameter in the
// count, kept in fp32 outside the model dtype's rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model_test_util.h"
#include "parallel/local_comm.h"

namespace mtrain::model {
namespace {

using testing::random_batch;
using testing::RandomBatch;

ModelConfig biased_moe() {
  ModelConfig c = testing::tiny_moe();
  c.moe.layers = {1, 1};
  c.moe.router.score_function = moe::ScoreFunction::kSigmoid;
  c.moe.router.enable_expert_bias = true;
  c.moe.router.bias_update_rate = 0.05;  // large: the bias soon changes the selection
  return c;
}

std::vector<int> bias_params(const ParamStore& ps) {
  std::vector<int> out;
  for (int i = 0; i < static_cast<int>(ps.infos().size()); ++i)
    if (ps.info(i).name.ends_with("mlp.router.expert_bias")) out.push_back(i);
  return out;
}

class ExpertBias : public ::testing::TestWithParam<Recompute> {};

TEST_P(ExpertBias, MovesBySignOfTheStepsCounts) {
  ModelConfig c = biased_moe();
  c.recompute = GetParam();
  device::Device dev(device::DeviceProfile{}, 0);
  GptModel m(c, dev);
  ParamStore& ps = m.params();
  const std::vector<int> bias = bias_params(ps);
  ASSERT_EQ(bias.size(), 2u);
  const int64_t E = c.moe.num_experts, B = c.micro_batch, T = c.seq_length, k = c.moe.router.topk;
  const int mbs = 2;
  std::vector<double> ref(2 * E, 0.0);  // fp64 re-computation of both layers' biases
  parallel::SelfComm group("tp_dp_cp");
  bool moved_routing = false;
  uint64_t first_routing = 0;
  for (int step = 0; step < 4; ++step) {
    for (int mb = 0; mb < mbs; ++mb) {
      RandomBatch rb = random_batch(B, T, c.vocab, 100 + mb);  // the same data every step
      TokenBatch b = rb.view(B, T, false);
      b.aux_loss_scale = 1.0f / static_cast<float>(B * T);
      m.forward(b, 7, true);
      if (mb == 0 && step == 0) first_routing = m.aux_losses().routing_hash;
      if (mb == 0 && step > 0) moved_routing = moved_routing || m.aux_losses().routing_hash != first_routing;
      m.backward(b, rb.weights.data(), 7, true, mb == 0);
    }
    // Evaluation forwards route too, but count nothing.
    RandomBatch eval = random_batch(B, T, c.vocab, 999);
    m.forward(eval.view(B, T, false), 0, false);
    const std::vector<float> counts(m.expert_counts(), m.expert_counts() + 2 * E);
    for (int r = 0; r < 2; ++r) {
      double sum = 0, mean = 0;
      for (int64_t e = 0; e < E; ++e) sum += counts[r * E + e];
      // Every token of each training micro-batch picks k experts, counted once (not again by a recompute).
      EXPECT_EQ(sum, static_cast<double>(mbs * B * T * k)) << "layer " << r << " step " << step;
      mean = sum / static_cast<double>(E);
      for (int64_t e = 0; e < E; ++e) {
        const double offset = mean - counts[r * E + e];
        ref[r * E + e] += 0.05 * (offset > 0 ? 1.0 : offset < 0 ? -1.0 : 0.0);
      }
    }
    m.update_expert_bias(group);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(ps.grad(bias[r]), nullptr) << "the optimizer never sees the bias";
      for (int64_t e = 0; e < E; ++e) {
        // fp32 sums of at most 4 steps of +-0.05: within 4 u of 0.2 of the fp64 value.
        EXPECT_NEAR(ps.param(bias[r])[e], ref[r * E + e], 4 * 6e-8 * 0.2) << "layer " << r << " expert " << e;
        EXPECT_EQ(m.expert_counts()[r * E + e], 0.f) << "the counts restart after the update";
      }
    }
  }
  double moved = 0;
  for (double v : ref) moved += std::abs(v);
  EXPECT_GT(moved, 0.0) << "the example never moved the bias";
  EXPECT_TRUE(moved_routing) << "the bias never changed a top-k selection on the same data";
}

INSTANTIATE_TEST_SUITE_P(Recompute, ExpertBias, ::testing::Values(Recompute::kNone, Recompute::kFull),
                         [](const auto& info) { return info.param == Recompute::kNone ? "none" : "full"; });

// Megatron's expert_bias is a buffer: not in the parameter count, and fp32
// in a bf16 model (placed after the rounded parameters).
TEST(ExpertBiasBuffer, NotAParameterAndKeptInFp32) {
  ModelConfig c = biased_moe();
  c.dtype = DType::kBF16;
  device::Device dev(device::DeviceProfile{}, 0);
  GptModel with(c, dev);
  ModelConfig plain = c;
  plain.moe.router.enable_expert_bias = false;
  GptModel without(plain, dev);
  EXPECT_EQ(with.params().count(), without.params().count());
  for (int i : bias_params(with.params())) {
    const ParamInfo& p = with.params().info(i);
    EXPECT_TRUE(p.buffer);
    EXPECT_FALSE(p.trainable);
    EXPECT_GE(p.offset, with.params().rounded_numel()) << p.name;
  }
  EXPECT_EQ(with.params().rounded_numel(), without.params().rounded_numel());
}

}  // namespace
}  // namespace mtrain::model
