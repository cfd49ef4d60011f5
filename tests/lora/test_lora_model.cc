// LoRA on the whole model: analytic gradients of every adapter (A and B of
// qkv, proj, fc1, fc2) against central finite differences, fused and unfused
// kernels, with adapter dropout, rsLoRA and full recompute; step 0 equals the
// base model exactly; the frozen base has no gradient; and the simulated
// device holds exactly the bytes the arithmetic says (base weights at the
// model dtype; adapters with fp32 gradients and Adam m, v and fp32 master).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/errors.h"
#include "lora_test_util.h"
#include "optim/optimizer.h"
#include "train/trainer.h"

namespace mtrain::lora {
namespace {

using model::GptModel;
using model::ModelConfig;
using model::ParamInfo;
using model::ParamStore;
using model::TokenBatch;
using model::testing::all_fused;
using model::testing::loss_of;
using model::testing::random_batch;
using model::testing::RandomBatch;

struct Case {
  std::string name;
  ModelConfig config;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> cases() {
  std::vector<Case> out;
  for (bool fused : {true, false}) {
    const std::string f = fused ? "fused" : "unfused";
    ModelConfig llama = testing::tiny_lora();
    all_fused(llama, fused);
    out.push_back({"llama_" + f, llama});
    ModelConfig gpt2 = testing::tiny_lora(model::testing::tiny_gpt2());
    all_fused(gpt2, fused);
    out.push_back({"gpt2_" + f, gpt2});
  }
  ModelConfig drop = testing::tiny_lora();
  drop.lora.dropout = 0.3f;  // the mask must be the same in forward, backward and every FD evaluation
  out.push_back({"llama_lora_dropout", drop});
  ModelConfig rs = testing::tiny_lora();
  rs.lora.rslora = true;
  rs.lora.alpha = 4;  // scale alpha / sqrt(r) = 2 (alpha / r would be 1); a larger one bends the loss beyond FD's reach
  out.push_back({"llama_rslora", rs});
  ModelConfig full = testing::tiny_lora();
  full.recompute = model::Recompute::kFull;
  full.lora.dropout = 0.3f;
  out.push_back({"llama_full_recompute", full});
  return out;
}

class LoraGrad : public ::testing::TestWithParam<Case> {};

TEST_P(LoraGrad, AdaptersMatchFiniteDifferencesAndTheBaseHasNoGradient) {
  const ModelConfig& c = GetParam().config;
  device::Device dev(device::DeviceProfile{}, 0);
  GptModel m(c, dev);
  ParamStore& ps = m.params();
  testing::randomize_lora_b(ps, 5);
  const int64_t B = c.micro_batch, T = c.seq_length;
  RandomBatch rb = random_batch(B, T, c.vocab, 11);
  const TokenBatch b = rb.view(B, T, false);
  ps.grads().zero();
  loss_of(m, b, rb.weights);
  m.backward(b, rb.weights.data(), 7, true);
  std::vector<float> analytic(ps.grads().data(), ps.grads().data() + ps.numel());

  const float eps = 1e-2f;
  Rng pick(3);
  int adapters = 0;
  for (int i = 0; i < static_cast<int>(ps.infos().size()); ++i) {
    const ParamInfo& p = ps.info(i);
    if (p.in_base) {  // frozen: no gradient buffer at all
      EXPECT_FALSE(p.trainable) << p.name;
      EXPECT_EQ(ps.grad(i), nullptr) << p.name;
      continue;
    }
    ++adapters;
    for (int rep = 0; rep < 3; ++rep) {
      const int64_t j = static_cast<int64_t>(pick.next_u64() % p.numel);
      float* w = ps.param(i) + j;
      const float saved = *w;
      *w = saved + eps;
      const double up = loss_of(m, b, rb.weights);
      *w = saved - eps;
      const double down = loss_of(m, b, rb.weights);
      *w = saved;
      const double fd = (up - down) / (2.0 * eps);
      // As tests/model/test_model_grad.cc: atol the central difference's
      // rounding noise (~2e-4 for ~11 fp32 token losses, 10x margin), rtol
      // its O(eps^2) truncation.
      EXPECT_NEAR(analytic[p.offset + j], fd, 2e-3 + 2e-2 * std::abs(fd)) << p.name << " element " << j;
    }
  }
  EXPECT_EQ(adapters, 2 * 4 * c.num_layers);  // A and B on each of the four linears
}

INSTANTIATE_TEST_SUITE_P(Variants, LoraGrad, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// PEFT's init (B = 0) makes step 0 the base model: the same losses, bit for bit.
TEST(LoraModel, StepZeroEqualsTheBaseModelExactly) {
  for (ModelConfig base : {model::testing::tiny_llama(), model::testing::tiny_gpt2()}) {
    ModelConfig lora = testing::tiny_lora(base);
    lora.lora.dropout = 0.3f;
    testing::expect_step_zero_is_the_base(base, lora);
  }
}

// A is Kaiming-uniform as PEFT's kaiming_uniform_(a=sqrt(5)): U(-1/sqrt(in), 1/sqrt(in)).
TEST(LoraModel, AIsKaimingUniformAndBIsZero) {
  ModelConfig c = testing::tiny_lora();
  device::Device dev(device::DeviceProfile{}, 0);
  GptModel m(c, dev);
  for (int i = 0; i < static_cast<int>(m.params().infos().size()); ++i) {
    const ParamInfo& p = m.params().info(i);
    if (p.in_base) continue;
    const float* w = m.params().param(i);
    if (p.name.find(".lora_B.") != std::string::npos) {
      for (int64_t j = 0; j < p.numel; ++j) ASSERT_EQ(w[j], 0.f) << p.name;
      continue;
    }
    const double bound = 1.0 / std::sqrt(static_cast<double>(p.full_shape[1]));
    double lo = 0, hi = 0, sum_sq = 0;
    for (int64_t j = 0; j < p.numel; ++j) {
      lo = std::min(lo, double(w[j])), hi = std::max(hi, double(w[j]));
      sum_sq += double(w[j]) * w[j];
    }
    EXPECT_LE(hi, bound) << p.name;
    EXPECT_GE(lo, -bound) << p.name;
    // Variance of U(-b, b) is b^2/3; with >= 64 samples the estimate stays within 50%.
    EXPECT_NEAR(sum_sq / p.numel, bound * bound / 3, 0.5 * bound * bound / 3) << p.name;
  }
}

// Every dimension a multiple of 16 so no alignment padding enters the sums.
ModelConfig aligned_config() {
  ModelConfig c = model::testing::tiny_llama();
  c.ffn = 32;
  c.dtype = DType::kBF16;
  c = testing::tiny_lora(c);
  c.lora.rank = 16;
  return c;
}

TEST(LoraModel, DeviceHoldsBaseWeightsAndAdapterTrainingStateOnly) {
  const ModelConfig c = aligned_config();
  const int64_t C = c.hidden, F = c.ffn, V = c.padded_vocab, L = c.num_layers, r = c.lora.rank;
  const int64_t QKV = c.groups * (c.heads / c.groups + 2) * c.head_dim, HD = c.heads * c.head_dim;
  // Megatron's GPT with qkv bias, untied: per layer qkv + bias, proj, fc1 (gate|up), fc2, two RMSNorms.
  const int64_t base = L * (QKV * C + QKV + C * HD + 2 * F * C + C * F + 2 * C) + 2 * V * C + C;
  // LoRA: A (r, in) and B (out, r) for qkv (C -> QKV), proj (HD -> C), fc1 (C -> 2F), fc2 (F -> C).
  const int64_t adapters = L * r * ((C + QKV) + (HD + C) + (C + 2 * F) + (F + C));
  device::Device dev(device::DeviceProfile{}, 0);
  GptModel m(c, dev);
  optim::Optimizer opt(dev, train::optimizer_ranges(m.params()), m.params().numel(), c.dtype, {});
  const auto& by = dev.stats().by_category;
  auto bytes = [&](device::MemCategory k) { return by[static_cast<int>(k)]; };
  EXPECT_EQ(bytes(device::MemCategory::kWeights), 2 * (base + adapters));  // bf16
  EXPECT_EQ(bytes(device::MemCategory::kGrads), 4 * adapters);             // fp32 main grads
  EXPECT_EQ(bytes(device::MemCategory::kOptimizer), 12 * adapters);        // Adam m, v and the fp32 master
  EXPECT_EQ(m.params().trainable_count(), adapters);
}

// modules_to_save and --lora_bias all train in full next to the adapters.
TEST(LoraModel, ModulesToSaveAndBiasesTrain) {
  ModelConfig c = testing::tiny_lora(model::testing::tiny_gpt2());  // tied embeddings, biases
  c.lora.modules_to_save = {"output_layer"};
  c.lora.bias_all = true;
  device::Device dev(device::DeviceProfile{}, 0);
  GptModel m(c, dev);
  for (const ParamInfo& p : m.params().infos()) {
    const bool want = !p.in_base || p.name.ends_with(".bias") || p.name == "embedding.word_embeddings.weight";
    EXPECT_EQ(p.trainable, want) << p.name;
  }
}

// --target_regex selects modules by whole name; one that selects nothing is refused (exit 3) before training.
TEST(LoraModel, TargetRegexSelectsModulesAndMustMatchOne) {
  ModelConfig c = testing::tiny_lora();
  c.lora.target_modules.clear();
  c.lora.target_regex = R"(decoder\.layers\.1\.mlp\.linear_fc2)";
  device::Device dev(device::DeviceProfile{}, 0);
  GptModel m(c, dev);
  std::vector<std::string> adapters;
  for (const ParamInfo& p : m.params().infos())
    if (!p.in_base) adapters.push_back(p.name);
  EXPECT_EQ(adapters, (std::vector<std::string>{"decoder.layers.1.mlp.linear_fc2.lora_A.weight",
                                                "decoder.layers.1.mlp.linear_fc2.lora_B.weight"}));
  c.lora.target_regex = "linear_qkv";  // not the whole name
  try {
    GptModel none(c, dev);
    ADD_FAILURE() << "a regex matching no module was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kConfig);
    EXPECT_STREQ(e.what(), "--target_regex 'linear_qkv' matches no linear layer of this model");
  }
}

}  // namespace
}  // namespace mtrain::lora
