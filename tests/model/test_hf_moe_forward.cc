// A Hugging Face Qwen2-MoE or Mixtral directory taken with `--model` (its
// config.json through the flag mapping, its tensors through HfModelReader)
// gives the logits of transformers' math, recomputed here in fp64 from the
// HF tensors alone:
//
//   Qwen2MoeSparseMoeBlock / MixtralSparseMoeBlock.forward (modeling_qwen2_moe.py,
//   modeling_mixtral.py): router_logits = gate(x); w = softmax(router_logits);
//   w, experts = topk(w, k); if norm_topk_prob (Mixtral: always): w /= sum(w);
//   out = sum_k w_k * down(silu(gate_proj x) * up_proj x)
//   (+ Qwen2-MoE: sigmoid(shared_expert_gate x) * shared_expert(x));
//   Qwen2MoeDecoderLayer: MoE iff layer not in mlp_only_layers and
//   (layer + 1) % decoder_sparse_step == 0, else a dense MLP of intermediate_size;
//   attention as Llama's (rotate_half RoPE, GQA, causal), RMSNorm x * rsqrt(mean x^2 + eps) * w.
//
// Bound: the fp32 model differs from the exact logits only by rounding; every
// stage is a sum of at most 32 terms and about 50 stages chain (the tiny
// models of model_test_util.h, same argument as kPathRtol), so the whole
// logits tensor is within kPathRtol of the fp64 one in the 2-norm. A wrong
// routing rule (renormalising or not, a missing gate) moves it by > 1e-2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "../checkpoint/hf_dir_test_util.h"
#include "../common/fs_test_util.h"
#include "config/cli.h"
#include "model_test_util.h"

namespace mtrain::model {
namespace {

using checkpoint::HfArch;
using checkpoint::HfModelShape;
using Vec = std::vector<double>;
using Weights = std::map<std::string, std::vector<float>>;

// y = W x for a row-major (rows, x.size()) W.
Vec matvec(const std::vector<float>& W, const Vec& x) {
  const size_t cols = x.size(), rows = W.size() / cols;
  Vec y(rows, 0.0);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) y[r] += static_cast<double>(W[r * cols + c]) * x[c];
  return y;
}

Vec rmsnorm(const Vec& h, const std::vector<float>& w, double eps) {
  double ms = 0;
  for (double v : h) ms += v * v / static_cast<double>(h.size());
  Vec out(h.size());
  for (size_t i = 0; i < h.size(); ++i) out[i] = h[i] / std::sqrt(ms + eps) * w[i];
  return out;
}

// down(silu(gate x) * up x): Qwen2MoeMLP / MixtralBlockSparseTop2MLP (w2(silu(w1 x) * w3 x)).
Vec swiglu(const Weights& w, const std::string& gate, const std::string& up, const std::string& down, const Vec& x) {
  const Vec g = matvec(w.at(gate), x), u = matvec(w.at(up), x);
  Vec a(g.size());
  for (size_t i = 0; i < g.size(); ++i) a[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
  return matvec(w.at(down), a);
}

struct Reference {
  const HfModelShape& s;
  const Weights& w;
  double min_topk_gap = 1.0;  // smallest relative gap between the k-th and (k+1)-th probability

  Vec moe(int64_t layer, const Vec& x) {
    const bool mixtral = s.arch == HfArch::kMixtral;
    const std::string p = "model.layers." + std::to_string(layer) + (mixtral ? ".block_sparse_moe." : ".mlp.");
    Vec prob = matvec(w.at(p + "gate.weight"), x);
    const double mx = *std::max_element(prob.begin(), prob.end());
    double z = 0;
    for (double& v : prob) z += (v = std::exp(v - mx));
    for (double& v : prob) v /= z;
    std::vector<int> order(prob.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return prob[a] > prob[b]; });
    const int64_t k = s.moe.topk;
    min_topk_gap = std::min(min_topk_gap, (prob[order[k - 1]] - prob[order[k]]) / prob[order[k - 1]]);
    double sum = 0;
    for (int64_t i = 0; i < k; ++i) sum += prob[order[i]];
    Vec out(x.size(), 0.0);
    for (int64_t i = 0; i < k; ++i) {
      const std::string e = p + "experts." + std::to_string(order[i]) + ".";
      const Vec y = mixtral ? swiglu(w, e + "w1.weight", e + "w3.weight", e + "w2.weight", x)
                            : swiglu(w, e + "gate_proj.weight", e + "up_proj.weight", e + "down_proj.weight", x);
      const double weight = prob[order[i]] / (s.moe.norm_topk_prob ? sum : 1.0);
      for (size_t c = 0; c < x.size(); ++c) out[c] += weight * y[c];
    }
    if (s.moe.shared_ffn > 0) {
      const std::string e = p + "shared_expert.";
      const Vec y = swiglu(w, e + "gate_proj.weight", e + "up_proj.weight", e + "down_proj.weight", x);
      const double g = 1.0 / (1.0 + std::exp(-matvec(w.at(p + "shared_expert_gate.weight"), x)[0]));
      for (size_t c = 0; c < x.size(); ++c) out[c] += g * y[c];
    }
    return out;
  }

  // Causal GQA attention with rotate_half RoPE over all positions of one layer (h: T rows of C).
  std::vector<Vec> attention(int64_t layer, const std::vector<Vec>& a) {
    const std::string p = "model.layers." + std::to_string(layer) + ".self_attn.";
    const int64_t T = static_cast<int64_t>(a.size()), H = s.heads, G = s.groups, D = s.head_dim;
    std::vector<Vec> q(T), k(T), v(T), out(T);
    for (int64_t t = 0; t < T; ++t) {
      q[t] = matvec(w.at(p + "q_proj.weight"), a[t]), k[t] = matvec(w.at(p + "k_proj.weight"), a[t]);
      v[t] = matvec(w.at(p + "v_proj.weight"), a[t]);
      if (s.qkv_bias())
        for (auto [x, b] : {std::pair{&q[t], "q_proj.bias"}, {&k[t], "k_proj.bias"}, {&v[t], "v_proj.bias"}})
          for (size_t i = 0; i < x->size(); ++i) (*x)[i] += w.at(p + b)[i];
      for (Vec* x : {&q[t], &k[t]})
        for (size_t h = 0; h < x->size() / D; ++h)
          for (int64_t i = 0; i < D / 2; ++i) {
            const double ang = t * std::pow(s.rope_theta, -2.0 * i / D);
            double& x1 = (*x)[h * D + i];
            double& x2 = (*x)[h * D + i + D / 2];
            const double r1 = x1 * std::cos(ang) - x2 * std::sin(ang), r2 = x2 * std::cos(ang) + x1 * std::sin(ang);
            x1 = r1, x2 = r2;
          }
    }
    for (int64_t t = 0; t < T; ++t) {
      Vec o(H * D, 0.0);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / (H / G);
        Vec sc(t + 1);
        for (int64_t u = 0; u <= t; ++u) {
          for (int64_t i = 0; i < D; ++i) sc[u] += q[t][h * D + i] * k[u][g * D + i];
          sc[u] /= std::sqrt(static_cast<double>(D));
        }
        const double mx = *std::max_element(sc.begin(), sc.end());
        double z = 0;
        for (double& x : sc) z += (x = std::exp(x - mx));
        for (int64_t u = 0; u <= t; ++u)
          for (int64_t i = 0; i < D; ++i) o[h * D + i] += sc[u] / z * v[u][g * D + i];
      }
      out[t] = matvec(w.at(p + "o_proj.weight"), o);
    }
    return out;
  }

  std::vector<Vec> logits(const std::vector<int32_t>& tokens) {
    const int64_t T = static_cast<int64_t>(tokens.size()), C = s.hidden;
    std::vector<Vec> h(T);
    for (int64_t t = 0; t < T; ++t)
      h[t] = Vec(w.at("model.embed_tokens.weight").begin() + tokens[t] * C,
                 w.at("model.embed_tokens.weight").begin() + (tokens[t] + 1) * C);
    for (int64_t l = 0; l < s.num_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      std::vector<Vec> a(T);
      for (int64_t t = 0; t < T; ++t) a[t] = rmsnorm(h[t], w.at(p + "input_layernorm.weight"), s.rms_norm_eps);
      const std::vector<Vec> o = attention(l, a);
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t c = 0; c < C; ++c) h[t][c] += o[t][c];
        const Vec b = rmsnorm(h[t], w.at(p + "post_attention_layernorm.weight"), s.rms_norm_eps);
        const Vec m = s.is_moe_layer(l) ? moe(l, b)
                                        : swiglu(w, p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight",
                                                 p + "mlp.down_proj.weight", b);
        for (int64_t c = 0; c < C; ++c) h[t][c] += m[c];
      }
    }
    std::vector<Vec> out(T);
    for (int64_t t = 0; t < T; ++t)
      out[t] = matvec(w.at("lm_head.weight"), rmsnorm(h[t], w.at("model.norm.weight"), s.rms_norm_eps));
    return out;
  }
};

class HfMoeForward : public ::testing::TestWithParam<HfArch> {};

TEST_P(HfMoeForward, LogitsMatchAnFp64ReferenceOfTransformersMath) {
  mtrain::testing::TempDir tmp;
  PosixFileSystem fs;
  const HfModelShape s = checkpoint::testing::tiny_moe_hf_shape(GetParam());
  const std::string dir = tmp / "hf";
  const Weights w = checkpoint::testing::write_tiny_hf_dir(fs, dir, s, checkpoint::StDType::kF32, 5, [](auto& ts) {
    for (auto& t : ts)
      for (float& x : t.values) x *= 0.5f;  // exact in fp32; keeps the residual stream near unit scale
  });

  // The model flags come from config.json through --model, as in `mtrain sft --model`.
  const std::vector<std::string> args = {"mtrain", "sft", "--model", dir, "--train_iters", "1", "--max_length", "8"};
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  const config::Invocation inv = config::parse_command_line(static_cast<int>(argv.size()), argv.data());
  ModelConfig c = model_config_from_args(inv.args, s.vocab_size);
  const int64_t T = 7;
  c.seq_length = T;
  c.micro_batch = 1;
  device::Device dev(device::DeviceProfile{}, 0);
  GptModel m(c, dev);
  const checkpoint::HfModelReader r = checkpoint::HfModelReader::open(fs, dir, c.padded_vocab);
  float* flat = m.params().params().data();
  for (const ParamInfo& p : m.params().infos())
    r.read_block(p.name, std::vector<int64_t>(p.full_shape.size(), 0), p.full_shape, flat + p.offset);

  const std::vector<int32_t> tokens = {3, 17, 42, 8, 49, 0, 25}, targets = {17, 42, 8, 49, 0, 25, 1};
  std::vector<int32_t> positions(T);
  std::iota(positions.begin(), positions.end(), 0);
  TokenBatch b;
  b.B = 1, b.T = T, b.tokens = tokens.data(), b.targets = targets.data(), b.positions = positions.data();
  m.forward(b, 1, false);
  const float* logits = m.logits();  // (T, padded vocab)

  Reference ref{s, w};
  const std::vector<Vec> want = ref.logits(tokens);
  ASSERT_GT(ref.min_topk_gap, 1e-3) << "a near tie in the top-k: the fp32 model may pick another expert";
  double diff = 0, norm = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t v = 0; v < s.vocab_size; ++v) {
      const double d = logits[t * c.padded_vocab + v] - want[t][v];
      diff += d * d, norm += want[t][v] * want[t][v];
    }
  EXPECT_LE(std::sqrt(diff / norm), testing::kPathRtol) << "|logits - fp64| / |fp64| over " << T << " tokens";
}

INSTANTIATE_TEST_SUITE_P(Architectures, HfMoeForward, ::testing::Values(HfArch::kQwen2Moe, HfArch::kMixtral),
                         [](const auto& info) { return std::string(checkpoint::hf_model_type(info.param)); });

}  // namespace
}  // namespace mtrain::model
