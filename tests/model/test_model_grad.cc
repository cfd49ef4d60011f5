// Whole-model gradient checks: analytic gradients of every parameter against
// central finite differences, for each architecture family and each fusion
// setting; fused == unfused; recompute == no recompute.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "model_test_util.h"
#include "test_util/fp32_bounds.h"

namespace mtrain::model {
namespace {

using testing::all_fused;
using testing::loss_of;
using testing::random_batch;
using testing::RandomBatch;

struct Case {
  std::string name;
  ModelConfig config;
  bool docs = false;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (bool fused : {true, false}) {
    const std::string f = fused ? "fused" : "unfused";
    ModelConfig llama = testing::tiny_llama();
    all_fused(llama, fused);
    out.push_back({"llama_" + f, llama});
    ModelConfig gpt2 = testing::tiny_gpt2();
    all_fused(gpt2, fused);
    out.push_back({"gpt2_" + f, gpt2});
    ModelConfig packed = llama;
    out.push_back({"llama_packed_" + f, packed, true});
    ModelConfig drop = llama;
    drop.hidden_dropout = 0.1f;
    drop.attention_dropout = 0.2f;
    out.push_back({"llama_dropout_" + f, drop});
    ModelConfig qwen3 = testing::tiny_qwen3();
    all_fused(qwen3, fused);
    out.push_back({"qwen3_qk_layernorm_" + f, qwen3});
  }
  ModelConfig mha = testing::tiny_llama();
  mha.groups = mha.heads;
  out.push_back({"llama_mha", mha});
  ModelConfig full = testing::tiny_llama();
  full.recompute = Recompute::kFull;
  out.push_back({"llama_full_recompute", full});
  ModelConfig sel = testing::tiny_llama();
  sel.fusions.flash_attention = false;
  sel.recompute = Recompute::kSelective;
  out.push_back({"llama_selective_recompute_unfused", sel});
  ModelConfig gpt2_qk = testing::tiny_gpt2();  // --qk_layernorm with LayerNorm: weight and bias
  gpt2_qk.qk_layernorm = true;
  out.push_back({"gpt2_qk_layernorm", gpt2_qk});
  return out;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class ModelGrad : public ::testing::TestWithParam<Case> {};

TEST_P(ModelGrad, MatchesFiniteDifferences) {
  const Case& tc = GetParam();
  device::Device dev(device::DeviceProfile{}, 0);
  GptModel m(tc.config, dev);
  const int64_t B = tc.config.micro_batch, T = tc.config.seq_length;
  RandomBatch rb = random_batch(B, T, tc.config.vocab, 11);
  const TokenBatch b = rb.view(B, T, tc.docs);
  ParamStore& ps = m.params();
  ps.grads().zero();
  loss_of(m, b, rb.weights, true);
  m.backward(b, rb.weights.data(), 7, true);
  std::vector<float> analytic(ps.grads().data(), ps.grads().data() + ps.numel());

  const float eps = 1e-2f;
  Rng pick(3);
  int checked = 0;
  for (const ParamInfo& p : ps.infos()) {
    for (int rep = 0; rep < 3; ++rep) {
      const int64_t j = p.offset + static_cast<int64_t>(pick.next_u64() % p.numel);
      float* w = ps.params().data() + j;
      const float saved = *w;
      *w = saved + eps;
      const double up = loss_of(m, b, rb.weights, true);
      *w = saved - eps;
      const double down = loss_of(m, b, rb.weights, true);
      *w = saved;
      const double fd = (up - down) / (2.0 * eps);
      // atol: the central difference's rounding noise, about sqrt(n) * c * u *
      // |token loss| / (2 eps) ~ 2e-4 for these ~11 fp32 token losses, with a
      // 10x margin; rtol: the O(eps^2) truncation (docs/DESIGN-NOTES.md).
      const double tol = 2e-3 + 2e-2 * std::abs(fd);
      EXPECT_NEAR(analytic[j], fd, tol) << p.name << " element " << (j - p.offset);
      ++checked;
    }
  }
  EXPECT_GT(checked, 30);
}

INSTANTIATE_TEST_SUITE_P(Variants, ModelGrad, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// Runs forward+backward and returns (losses, grads).
std::pair<std::vector<float>, std::vector<float>> run(const ModelConfig& c, bool docs) {
  device::Device dev(device::DeviceProfile{}, 0);
  GptModel m(c, dev);
  RandomBatch rb = random_batch(c.micro_batch, c.seq_length, c.vocab, 5);
  const TokenBatch b = rb.view(c.micro_batch, c.seq_length, docs);
  m.params().grads().zero();
  m.forward(b, 9, true);
  std::vector<float> losses(m.losses(), m.losses() + c.micro_batch * c.seq_length);
  m.backward(b, rb.weights.data(), 9, true);
  return {losses, std::vector<float>(m.params().grads().data(), m.params().grads().data() + m.params().numel())};
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(mtrain::testing::close_in_max_norm(a.data(), b.data(), a.size(), testing::kPathRtol)) << what;
}

// Per parameter tensor: each has its own scale.
void expect_grads_close(const ModelConfig& c, const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  device::Device dev(device::DeviceProfile{}, 0);
  GptModel m(c, dev);
  for (const ParamInfo& p : m.params().infos())
    EXPECT_TRUE(
        mtrain::testing::close_in_max_norm(a.data() + p.offset, b.data() + p.offset, p.numel, testing::kPathRtol))
        << "grad of " << p.name;
}

TEST(ModelFusion, EachFusionFlagMatchesUnfused) {
  for (int which = 0; which < 8; ++which) {
    for (ModelConfig base : {testing::tiny_llama(), testing::tiny_gpt2()}) {
      base.hidden_dropout = 0.1f;
      base.attention_dropout = 0.1f;
      ModelConfig other = base;
      bool* flags[] = {&other.fusions.masked_softmax,
                       &other.fusions.bias_dropout,
                       &other.fusions.bias_activation,
                       &other.fusions.cross_entropy,
                       &other.fusions.rope,
                       &other.fusions.rmsnorm,
                       &other.fusions.flash_attention,
                       &other.fusions.grad_accumulation};
      *flags[which] = false;
      if (which == 0) other.fusions.flash_attention = false;  // masked softmax only exists on the unfused path
      auto [la, ga] = run(base, true);
      auto [lb, gb] = run(other, true);
      SCOPED_TRACE("fusion flag #" + std::to_string(which));
      expect_close(la, lb, "per-token losses");
      expect_grads_close(base, ga, gb);
    }
  }
}

TEST(ModelRecompute, FullRecomputeIsExact) {
  ModelConfig c = testing::tiny_llama();
  c.hidden_dropout = 0.1f;
  ModelConfig r = c;
  r.recompute = Recompute::kFull;
  auto [la, ga] = run(c, false);
  auto [lb, gb] = run(r, false);
  EXPECT_EQ(la, lb);
  EXPECT_EQ(ga, gb);
}

TEST(ModelRecompute, BlockRecomputeOfTheFirstLayerIsExact) {
  ModelConfig c = testing::tiny_llama();
  c.hidden_dropout = 0.1f;
  ModelConfig r = c;
  r.recompute = Recompute::kFull;
  r.recompute_block_layers = 1;
  auto [la, ga] = run(c, false);
  auto [lb, gb] = run(r, false);
  EXPECT_EQ(la, lb);
  EXPECT_EQ(ga, gb);
}

TEST(ModelDeterminism, SameSeedSameBits) {
  auto [la, ga] = run(testing::tiny_llama(), true);
  auto [lb, gb] = run(testing::tiny_llama(), true);
  EXPECT_EQ(la, lb);
  EXPECT_EQ(ga, gb);
}

// backward(zero_grads = true) must equal zeroing the whole buffer first,
// whatever the buffer held, for tied (gpt2) and untied (llama) embeddings;
// a second micro-batch without it accumulates on top. ffn 23 leaves alignment
// padding between parameters in the flat buffer; it must end up zero too.
TEST(ModelZeroGrads, FirstMicroBatchOverwritesEveryGradient) {
  ModelConfig padded = testing::tiny_gpt2();
  padded.ffn = 23;
  for (const ModelConfig& c : {testing::tiny_llama(), testing::tiny_gpt2(), padded}) {
    device::Device dev(device::DeviceProfile{}, 0);
    GptModel m(c, dev);
    const RandomBatch rb = random_batch(c.micro_batch, c.seq_length, c.vocab, 5);
    const TokenBatch b = rb.view(c.micro_batch, c.seq_length, false);
    float* g = m.params().grads().data();
    const int64_t n = m.params().numel();
    auto step = [&](bool zero_grads) {
      m.forward(b, 9, true);
      m.backward(b, rb.weights.data(), 9, true, zero_grads);
      return std::vector<float>(g, g + n);
    };
    m.params().grads().zero();
    const std::vector<float> once = step(false);
    const std::vector<float> twice = step(false);
    for (int64_t i = 0; i < n; ++i) g[i] = 1e3f + static_cast<float>(i % 7);  // stale garbage
    EXPECT_EQ(step(true), once) << describe(c);
    EXPECT_EQ(step(false), twice) << describe(c);
  }
}

TEST(ModelDropout, DropoutChangesTheLoss) {
  ModelConfig c = testing::tiny_llama();
  ModelConfig d = c;
  d.hidden_dropout = 0.3f;
  auto [la, ga] = run(c, false);
  auto [lb, gb] = run(d, false);
  EXPECT_NE(la, lb);
}

}  // namespace
}  // namespace mtrain::model
