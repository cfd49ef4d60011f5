// --qk_layernorm inside the model (Qwen3's q_norm / k_norm): the forward
// against an fp64 reference of Hugging Face's Qwen3 math, and the gradients of
// the norms and of what feeds them against central differences of that fp64
// reference. Parameter names follow Megatron-core.
#include <gtest/gtest.h>
#include <omp.h>

#include <string>
#include <vector>

#include "model_test_util.h"
#include "test_util/fp32_bounds.h"
#include "test_util/qwen3_reference.h"

namespace mtrain::model {
namespace {

using mtrain::testing::Qwen3RefModel;

std::vector<double> tensor(GptModel& m, const std::string& name, int64_t rows = -1) {
  const int i = m.params().find(name);
  EXPECT_GE(i, 0) << name;
  if (i < 0) return {};
  const ParamInfo& p = m.params().info(i);
  const int64_t n = rows < 0 ? p.numel : rows * (p.numel / p.shape[0]);
  return std::vector<double>(m.params().param(i), m.params().param(i) + n);
}

// The whole model in HF's layout: Megatron's linear_qkv holds, per query
// group, its R = H/G query heads, then its key, then its value (D rows each);
// linear_fc1 is [gate; up].
Qwen3RefModel reference_of(GptModel& m) {
  const ModelConfig& c = m.config();
  Qwen3RefModel r;
  r.C = c.hidden, r.H = c.heads, r.G = c.groups, r.D = c.head_dim, r.F = c.ffn, r.V = c.vocab;
  r.eps = c.norm_eps, r.theta = c.rotary_base, r.qk_norm = c.qk_layernorm;
  r.embed = tensor(m, "embedding.word_embeddings.weight", c.vocab);
  r.lm_head = tensor(m, "output_layer.weight", c.vocab);
  r.final_norm = tensor(m, "decoder.final_layernorm.weight");
  const int64_t C = c.hidden, D = c.head_dim, R = c.heads / c.groups, F = c.ffn;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "decoder.layers." + std::to_string(l) + ".";
    mtrain::testing::Qwen3RefLayer L;
    L.input_norm = tensor(m, p + "input_layernorm.weight");
    const std::vector<double> qkv = tensor(m, p + "self_attention.linear_qkv.weight");
    for (int64_t g = 0; g < c.groups; ++g) {
      const auto block = qkv.begin() + g * (R + 2) * D * C;
      L.q_proj.insert(L.q_proj.end(), block, block + R * D * C);
      L.k_proj.insert(L.k_proj.end(), block + R * D * C, block + (R + 1) * D * C);
      L.v_proj.insert(L.v_proj.end(), block + (R + 1) * D * C, block + (R + 2) * D * C);
    }
    L.o_proj = tensor(m, p + "self_attention.linear_proj.weight");
    if (c.qk_layernorm) {
      L.q_norm = tensor(m, p + "self_attention.q_layernorm.weight");
      L.k_norm = tensor(m, p + "self_attention.k_layernorm.weight");
    }
    L.post_norm = tensor(m, p + "pre_mlp_layernorm.weight");
    const std::vector<double> fc1 = tensor(m, p + "mlp.linear_fc1.weight");
    L.gate_proj.assign(fc1.begin(), fc1.begin() + F * C);
    L.up_proj.assign(fc1.begin() + F * C, fc1.end());
    L.down_proj = tensor(m, p + "mlp.linear_fc2.weight");
    r.layers.push_back(std::move(L));
  }
  return r;
}

// Per-token losses (B*T) of the reference over the batch's rows.
std::vector<double> reference_losses(const Qwen3RefModel& r, const testing::RandomBatch& rb, int64_t B, int64_t T) {
  std::vector<double> out;
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int> tok(rb.tokens.begin() + b * T, rb.tokens.begin() + (b + 1) * T);
    const std::vector<int> pos(rb.positions.begin() + b * T, rb.positions.begin() + (b + 1) * T);
    const std::vector<int> tgt(rb.targets.begin() + b * T, rb.targets.begin() + (b + 1) * T);
    const std::vector<double> l = mtrain::testing::cross_entropy(mtrain::testing::qwen3_logits(r, tok, pos), tgt, r.V);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

// Norm weights away from their init of ones, so that a weight applied to the
// wrong head dimension, or not at all, changes the result.
void perturb_norm_weights(GptModel& m) {
  Rng rng(5);
  for (int i = 0; i < static_cast<int>(m.params().infos().size()); ++i) {
    const ParamInfo& p = m.params().info(i);
    if (p.name.find("q_layernorm") == std::string::npos && p.name.find("k_layernorm") == std::string::npos) continue;
    for (int64_t j = 0; j < p.numel; ++j)
      m.params().param(i)[j] = 0.5f + static_cast<float>(rng.next_u64() % 1000) / 1000.f;
  }
}

std::vector<float> as_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

// tiny_qwen3 with the fused RMSNorm kernel or the unfused op sequence
// (GetParam()), its q/k norm weights perturbed, and a random batch.
class QkNorm : public ::testing::TestWithParam<bool> {
 protected:
  QkNorm() : c_(config(GetParam())), m_(c_, dev_), rb_(testing::random_batch(B, T, c_.vocab, 11)) {
    omp_set_num_threads(1);
    perturb_norm_weights(m_);
  }
  static ModelConfig config(bool fused) {
    ModelConfig c = testing::tiny_qwen3();
    c.fusions.rmsnorm = fused;
    return c;
  }
  ModelConfig c_;
  device::Device dev_{device::DeviceProfile{}, 0};
  GptModel m_;
  const int64_t B = c_.micro_batch, T = c_.seq_length;
  testing::RandomBatch rb_;
};

// Each fp32 path is within about 50 * gamma_32 of the exact result
// (model_test_util.h, kPathRtol covers two such paths), so it is within
// kPathRtol of the fp64 reference in the max norm.
TEST_P(QkNorm, ForwardMatchesFp64Qwen3) {
  m_.forward(rb_.view(B, T, false), 7, false);
  const std::vector<float> want = as_float(reference_losses(reference_of(m_), rb_, B, T));
  EXPECT_TRUE(mtrain::testing::close_in_max_norm(m_.losses(), want.data(), want.size(), testing::kPathRtol));
}

// Central differences of the fp64 loss sum_i w_i loss_i (step 1e-5: truncation
// ~1e-10, rounding ~1e-11 relative) are exact to far below fp32's error, so
// each analytic fp32 gradient tensor is within kPathRtol of them in the max norm.
TEST_P(QkNorm, GradientsMatchFp64FiniteDifferences) {
  GptModel& m = m_;
  const testing::RandomBatch& rb = rb_;
  const TokenBatch b = rb.view(B, T, false);
  m.forward(b, 7, true);
  m.backward(b, rb.weights.data(), 7, true, true);
  auto loss = [&]() {
    const std::vector<double> l = reference_losses(reference_of(m), rb, B, T);
    double s = 0;
    for (size_t i = 0; i < l.size(); ++i) s += rb.weights[i] * l[i];
    return s;
  };
  int checked = 0;
  for (const char* name :
       {"decoder.layers.0.self_attention.q_layernorm.weight", "decoder.layers.0.self_attention.k_layernorm.weight",
        "decoder.layers.1.self_attention.q_layernorm.weight", "decoder.layers.1.self_attention.k_layernorm.weight",
        "decoder.layers.1.self_attention.linear_qkv.weight", "decoder.layers.1.input_layernorm.weight"}) {
    const int i = m.params().find(name);
    ASSERT_GE(i, 0) << name;
    const ParamInfo& p = m.params().info(i);
    std::vector<double> fd(p.numel);
    // The model's fp32 parameters are the point of evaluation: step in fp64
    // around them through a copy the reference reads.
    for (int64_t j = 0; j < p.numel; ++j) {
      float* w = m.params().param(i) + j;
      const float saved = *w;
      const double h = 1e-5;
      // fp32 cannot hold x +- 1e-5 exactly: step by the representable neighbours.
      const float up = static_cast<float>(saved + h), down = static_cast<float>(saved - h);
      *w = up;
      const double lu = loss();
      *w = down;
      const double ld = loss();
      *w = saved;
      fd[j] = (lu - ld) / (static_cast<double>(up) - static_cast<double>(down));
    }
    const std::vector<float> want = as_float(fd);
    EXPECT_TRUE(mtrain::testing::close_in_max_norm(m.params().grad(i), want.data(), p.numel, testing::kPathRtol))
        << "grad of " << name;
    ++checked;
  }
  EXPECT_EQ(checked, 6);
}

INSTANTIATE_TEST_SUITE_P(RmsNorm, QkNorm, ::testing::Values(true, false),
                         [](const auto& info) { return std::string(info.param ? "fused" : "unfused"); });

// The q/k norm weights: Megatron-core's names, size head_dim, no weight decay,
// frozen under LoRA unless --modules_to_save names them.
TEST(QkNormParams, NamesShapesAndLoraFreezing) {
  ModelConfig c = testing::tiny_qwen3();
  device::Device dev(device::DeviceProfile{}, 0);
  {
    GptModel m(c, dev);
    for (const char* n : {"q_layernorm.weight", "k_layernorm.weight"}) {
      const int i = m.params().find(std::string("decoder.layers.1.self_attention.") + n);
      ASSERT_GE(i, 0) << n;
      EXPECT_EQ(m.params().info(i).full_shape, Shape({c.head_dim}));
      EXPECT_FALSE(m.params().info(i).weight_decay);
    }
    EXPECT_LT(m.params().find("decoder.layers.0.self_attention.q_layernorm.bias"), 0);  // RMSNorm: no bias
  }
  auto trainable = [&](const ModelConfig& cfg, const char* name) {
    GptModel m(cfg, dev);
    const int i = m.params().find(name);
    EXPECT_GE(i, 0) << name;
    return i >= 0 && m.params().info(i).trainable;
  };
  ModelConfig lora = c;
  lora.lora.enabled = true;
  lora.lora.target_modules = {"linear_qkv"};
  EXPECT_FALSE(trainable(lora, "decoder.layers.0.self_attention.q_layernorm.weight"));
  lora.lora.modules_to_save = {"q_layernorm"};
  EXPECT_TRUE(trainable(lora, "decoder.layers.0.self_attention.q_layernorm.weight"));
  EXPECT_FALSE(trainable(lora, "decoder.layers.0.self_attention.k_layernorm.weight"));
  c.rmsnorm = false;
  EXPECT_TRUE(trainable(c, "decoder.layers.0.self_attention.k_layernorm.bias"));  // LayerNorm: a bias too
}

// What the simulated device (and so --dry_run, which builds the same model
// from meta tensors) accounts for the q/k norms: per layer 2 x head_dim
// weights (and fp32 gradients), the saved pre-norm q (B, H, T, D) and k
// (B, G, T, D) with their fp32 rstd per row, and one shared workspace buffer
// for their gradients.
TEST(QkNormMemory, ParamsAndActivationsAreAccounted) {
  int64_t params[2] = {0, 0};
  auto bytes = [&](bool qk, device::MemCategory cat) {
    device::Device dev(device::DeviceProfile{}, 0);
    ModelConfig c = testing::tiny_qwen3();
    c.qk_layernorm = qk;
    c.dtype = DType::kBF16;
    GptModel m(c, dev, /*meta=*/true);
    params[qk] = m.params().count();
    // weights in bf16, fp32 gradients: the flat buffers (with their alignment padding)
    if (cat == device::MemCategory::kWeights) {
      EXPECT_EQ(dev.stats().by_category[static_cast<int>(cat)], (m.params().numel() + m.params().frozen_numel()) * 2);
    }
    return dev.stats().by_category[static_cast<int>(cat)];
  };
  const ModelConfig c = testing::tiny_qwen3();
  const int64_t L = c.num_layers, B = c.micro_batch, T = c.seq_length, H = c.heads, G = c.groups, D = c.head_dim;
  using device::MemCategory;
  EXPECT_GT(bytes(true, MemCategory::kWeights), bytes(false, MemCategory::kWeights));
  EXPECT_EQ(params[1] - params[0], L * 2 * D);
  const int64_t per_layer = 2 * B * (H + G) * T * D + 4 * B * (H + G) * T;  // bf16 q/k, fp32 rstd
  EXPECT_EQ(bytes(true, MemCategory::kActivations) - bytes(false, MemCategory::kActivations),
            L * per_layer + 2 * B * (H + G) * T * D);
}

}  // namespace
}  // namespace mtrain::model
