// The MoE layer inside the model (lib/moe/moe_layer.h via model/moe_block.h):
// analytic gradients of every parameter (router, routed experts, shared
// expert and its gate) against central finite differences of the token
// losses plus the routers' auxiliary losses; grouped GEMM == the per-expert
// loop and fused == unfused permutation within the fp32 path bound; capacity
// padding changes nothing; the parameters carry Megatron-core's names.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "model_test_util.h"
#include "test_util/fp32_bounds.h"

namespace mtrain::model {
namespace {

using testing::moe_total_loss;
using testing::random_batch;
using testing::RandomBatch;
using testing::routed_central_difference;

using testing::tiny_moe;

struct Case {
  std::string name;
  ModelConfig config;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> cases() {
  std::vector<Case> out;
  out.push_back({"llama_grouped", tiny_moe()});
  ModelConfig looped = tiny_moe();
  looped.moe.grouped_gemm = false;
  looped.moe.permute_fusion = true;
  testing::all_fused(looped, false);
  out.push_back({"llama_looped_unfused", looped});
  // GPT-2 shape: GELU experts with fc1/fc2 biases, no shared expert, every layer MoE.
  ModelConfig gpt2 = testing::tiny_gpt2();
  gpt2.moe = tiny_moe().moe;
  gpt2.moe.layers = {1, 1};
  gpt2.moe.shared_ffn = 0;
  gpt2.moe.shared_gate = false;
  out.push_back({"gpt2_biases", gpt2});
  // Capacity 1.0 drops tokens (probs policy), padded to capacity; seq_aux_loss, top-k scaling.
  ModelConfig cap = tiny_moe();
  cap.moe.router.capacity_factor = 1.0;
  cap.moe.router.pad_to_capacity = true;
  cap.moe.router.load_balancing = moe::LoadBalancing::kSeqAuxLoss;
  cap.moe.router.topk_scaling_factor = 1.5;
  out.push_back({"capacity_dropping_padded", cap});
  ModelConfig sig = tiny_moe();
  sig.moe.router.score_function = moe::ScoreFunction::kSigmoid;
  sig.moe.layers = {1, 1};
  out.push_back({"sigmoid_router", sig});
  return out;
}

class MoeModelGrad : public ::testing::TestWithParam<Case> {};

TEST_P(MoeModelGrad, MatchesFiniteDifferences) {
  const Case& tc = GetParam();
  device::Device dev(device::DeviceProfile{}, 0);
  GptModel m(tc.config, dev);
  const int64_t B = tc.config.micro_batch, T = tc.config.seq_length;
  RandomBatch rb = random_batch(B, T, tc.config.vocab, 11);
  TokenBatch b = rb.view(B, T, false);
  b.aux_loss_scale = 1.0f;
  ParamStore& ps = m.params();
  ps.grads().zero();
  uint64_t routing = 0;
  moe_total_loss(m, b, rb.weights, &routing);
  EXPECT_GT(m.aux_losses().weighted, 0.0);
  m.backward(b, rb.weights.data(), 7, true);
  std::vector<float> analytic(ps.grads().data(), ps.grads().data() + ps.numel());

  // Routing is piecewise constant: a perturbation that flips a top-k choice
  // or a capacity drop has no derivative to compare, so such elements are
  // skipped (counted, and most elements must be checked).
  const float eps = 1e-2f;
  Rng pick(3);
  int checked = 0, flipped = 0;
  for (const ParamInfo& p : ps.infos()) {
    if (!p.trainable) continue;
    for (int rep = 0; rep < 3; ++rep) {
      const int64_t j = p.offset + static_cast<int64_t>(pick.next_u64() % p.numel);
      float* w = ps.params().data() + j;
      const std::optional<double> fd_or = routed_central_difference(m, b, rb.weights, w, eps, routing);
      if (!fd_or) {
        ++flipped;
        continue;
      }
      const double fd = *fd_or;
      // As the dense model's test (docs/DESIGN-NOTES.md, "Tolerances"): the central
      // difference's rounding noise with a 10x margin, plus the O(eps^2) truncation.
      EXPECT_NEAR(analytic[j], fd, 2e-3 + 2e-2 * std::abs(fd)) << p.name << " element " << (j - p.offset);
      ++checked;
    }
  }
  EXPECT_GT(checked, 4 * flipped);
  EXPECT_GT(checked, 30);
}

INSTANTIATE_TEST_SUITE_P(Variants, MoeModelGrad, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

struct RunResult {
  std::vector<float> losses, grads;
  AuxLosses aux;
};
RunResult run(const ModelConfig& c) {
  device::Device dev(device::DeviceProfile{}, 0);
  GptModel m(c, dev);
  RandomBatch rb = random_batch(c.micro_batch, c.seq_length, c.vocab, 5);
  TokenBatch b = rb.view(c.micro_batch, c.seq_length, false);
  b.aux_loss_scale = 0.5f;
  m.params().grads().zero();
  m.forward(b, 9, true);
  RunResult r;
  r.losses.assign(m.losses(), m.losses() + c.micro_batch * c.seq_length);
  r.aux = m.aux_losses();
  m.backward(b, rb.weights.data(), 9, true);
  r.grads.assign(m.params().grads().data(), m.params().grads().data() + m.params().numel());
  return r;
}

void expect_same_model(const ModelConfig& c, const RunResult& a, const RunResult& b) {
  EXPECT_EQ(a.aux.routing_hash, b.aux.routing_hash);
  EXPECT_TRUE(
      mtrain::testing::close_in_max_norm(a.losses.data(), b.losses.data(), a.losses.size(), testing::kPathRtol));
  device::Device dev(device::DeviceProfile{}, 0);
  GptModel m(c, dev);
  for (const ParamInfo& p : m.params().infos()) {
    if (!p.trainable) continue;
    EXPECT_TRUE(mtrain::testing::close_in_max_norm(a.grads.data() + p.offset, b.grads.data() + p.offset, p.numel,
                                                   testing::kPathRtol))
        << "grad of " << p.name;
  }
}

TEST(MoeModel, GroupedGemmEqualsLoop) {
  ModelConfig a = tiny_moe(), b = tiny_moe();
  b.moe.grouped_gemm = false;
  expect_same_model(a, run(a), run(b));
}

TEST(MoeModel, PermuteFusionEqualsUnfused) {
  ModelConfig a = tiny_moe(), b = tiny_moe();
  b.moe.permute_fusion = true;
  expect_same_model(a, run(a), run(b));
}

TEST(MoeModel, PaddingToCapacityChangesNothing) {
  ModelConfig a = tiny_moe();
  a.moe.router.capacity_factor = 1.0;
  ModelConfig b = a;
  b.moe.router.pad_to_capacity = true;
  // Padded rows are zero rows with zero weight; only the GEMM shapes (and so
  // possibly the BLAS kernel's summation order) change.
  expect_same_model(a, run(a), run(b));
}

TEST(MoeModel, FullRecomputeIsExact) {
  ModelConfig a = tiny_moe();
  a.moe.layers = {1, 1};
  ModelConfig b = a;
  b.recompute = Recompute::kFull;  // the router, permutation and experts run again in backward
  const RunResult ra = run(a), rb = run(b);
  EXPECT_EQ(ra.losses, rb.losses);
  EXPECT_EQ(ra.grads, rb.grads);
}

TEST(MoeModel, MegatronCoreParameterNames) {
  device::Device dev(device::DeviceProfile{}, 0);
  GptModel m(tiny_moe(), dev);
  const ParamStore& ps = m.params();
  const std::string l0 = "decoder.layers.0.mlp.";
  for (const std::string& n :
       {l0 + "router.weight", l0 + "experts.local_experts.0.linear_fc1.weight",
        l0 + "experts.local_experts.3.linear_fc2.weight", l0 + "shared_experts.linear_fc1.weight",
        l0 + "shared_experts.linear_fc2.weight", l0 + "shared_experts.gate_weight",
        std::string("decoder.layers.1.mlp.linear_fc1.weight")})
    EXPECT_GE(ps.find(n), 0) << n;
  EXPECT_EQ(ps.find(l0 + "linear_fc1.weight"), -1);  // the MoE layer has no dense MLP
  const ParamInfo& fc1 = ps.info(ps.find(l0 + "experts.local_experts.2.linear_fc1.weight"));
  EXPECT_EQ(fc1.full_shape, (Shape{16, 16}));  // SwiGLU: [gate; up] of ffn 8, hidden 16
  EXPECT_EQ(ps.info(ps.find(l0 + "router.weight")).full_shape, (Shape{4, 16}));
  EXPECT_EQ(ps.info(ps.find(l0 + "shared_experts.gate_weight")).full_shape, (Shape{1, 16}));
}

}  // namespace
}  // namespace mtrain::model
