// Shared fixtures for model tests: tiny configurations of each architecture
// family and a deterministic random micro-batch.
#pragma once

#include <optional>
#include <vector>

#include "common/rng.h"
#include "model/gpt.h"
#include "test_util/fp32_bounds.h"

namespace mtrain::model::testing {

// Llama/Qwen-like: RMSNorm, SwiGLU, RoPE, GQA, qkv bias, untied.
inline ModelConfig tiny_llama() {
  ModelConfig c;
  c.num_layers = 2;
  c.hidden = 16;
  c.ffn = 24;
  c.heads = 4;
  c.groups = 2;
  c.head_dim = 4;
  c.vocab = 29;
  c.padded_vocab = 32;
  c.max_positions = 16;
  c.seq_length = 8;
  c.micro_batch = 2;
  c.init_std = 0.2f;  // large enough that every gradient is well above FD noise
  return c;
}

// GPT-2-like: LayerNorm, GELU, learned positions, tied embeddings, biases.
inline ModelConfig tiny_gpt2() {
  ModelConfig c = tiny_llama();
  c.rmsnorm = false;
  c.swiglu = false;
  c.rope = false;
  c.untie = false;
  c.add_bias_linear = true;
  c.add_qkv_bias = false;
  c.groups = c.heads;
  c.ffn = 32;
  return c;
}

// Qwen3-like: tiny_llama with --qk_layernorm, no qkv bias, and a head dim
// (8) that is not hidden / heads (4 x 8 = 32 query columns for hidden 16).
inline ModelConfig tiny_qwen3() {
  ModelConfig c = tiny_llama();
  c.qk_layernorm = true;
  c.add_qkv_bias = false;
  c.head_dim = 8;
  return c;
}

// tiny_llama with an MoE layer 0 (4 experts of ffn 8, top-2, a shared expert
// of 12 with its sigmoid gate, aux and z losses large enough that their
// gradients stand well above finite-difference noise); layer 1 dense.
inline ModelConfig tiny_moe() {
  ModelConfig c = tiny_llama();
  c.moe.num_experts = 4;
  c.moe.ffn = 8;
  c.moe.layers = {1, 0};
  c.moe.shared_ffn = 12;
  c.moe.shared_gate = true;
  c.moe.router.num_experts = 4;
  c.moe.router.hidden = c.hidden;
  c.moe.router.topk = 2;
  c.moe.router.aux_loss_coeff = 1.0;
  c.moe.router.z_loss_coeff = 0.1;
  return c;
}

// Two ways of computing the same model (fused vs unfused kernels, TP shards vs
// the whole model) differ only in fp32 summation order (flash: tiled online
// softmax; unfused: whole rows; TP: partial sums added over ranks; and each
// BLAS kernel and thread count splits the GEMMs its own way). Single elements
// whose terms cancel may then differ by far more than u times their size
// (measured up to 1.3e-2 of an element between fused and unfused, 5e-3 for one
// path under two OpenBLAS kernels: an element bound with an absolute floor
// passed or failed depending on the CPU), so whole tensors are compared in the
// max norm. Bound: every stage of the tiny models is a sum of at most 32 terms
// (padded vocab 32, ffn <= 32, 16 tokens), within gamma_32 = 1.9e-6 of its
// terms' size in any order (test_util/fp32_bounds.h); forward and backward
// chain about 50 stages, so each way is within about 50 * gamma_32 ~ 1e-4 of
// the exact tensor and two ways within 2e-4 (kPathRtol). Measured: at most 1.1e-6 under
// every OpenBLAS core type and thread count, the same as one path under two
// kernels (8e-7); a real difference (a dropout mask or a scale) moves a tensor
// by 1e-2 or more.
inline const double kPathRtol = 2 * 50 * mtrain::testing::fp32_gamma(32);  // 1.9e-4

// Flat index into the full tensor of element (i, j) of this rank's TP shard of `p`.
inline int64_t full_index(const ParamInfo& p, int64_t i, int64_t j) {
  const int64_t full_rows = p.full_shape[0];
  const int64_t full_cols = p.full_shape.size() > 1 ? p.full_shape[1] : 1;
  const int64_t rows = p.shape[0], cols = p.numel / rows;
  int64_t r = i, c = j;
  if (p.shard.split == TpSplit::kRows && p.shard.tp > 1) {
    const int64_t block = rows / p.shard.parts;
    r = (i / block) * (full_rows / p.shard.parts) + p.shard.rank * block + i % block;
  } else if (p.shard.split == TpSplit::kCols && p.shard.tp > 1) {
    c = p.shard.rank * cols + j;
  }
  return r * full_cols + c;
}

// Every fusion flag on (the fused kernels) or off (the unfused op sequences).
inline void all_fused(ModelConfig& c, bool on) {
  c.fusions.masked_softmax = c.fusions.bias_dropout = c.fusions.bias_activation = on;
  c.fusions.cross_entropy = c.fusions.rope = c.fusions.rmsnorm = c.fusions.grad_accumulation = on;
  c.fusions.flash_attention = on;
}

struct RandomBatch {
  std::vector<int32_t> tokens, targets, positions, doc_ids;
  std::vector<float> weights;
  TokenBatch view(int64_t B, int64_t T, bool with_docs) const {
    TokenBatch b;
    b.B = B;
    b.T = T;
    b.tokens = tokens.data();
    b.targets = targets.data();
    b.positions = positions.data();
    b.doc_ids = with_docs ? doc_ids.data() : nullptr;
    return b;
  }
};

inline RandomBatch random_batch(int64_t B, int64_t T, int64_t vocab, uint64_t seed) {
  RandomBatch r;
  Rng rng(seed);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      r.tokens.push_back(static_cast<int32_t>(rng.next_u64() % vocab));
      r.targets.push_back(static_cast<int32_t>(rng.next_u64() % vocab));
      // Two packed documents per row: positions restart at the boundary.
      const int64_t split = T / 2 + b;
      r.doc_ids.push_back(t < split ? 0 : 1);
      r.positions.push_back(static_cast<int32_t>(t < split ? t : t - split));
      r.weights.push_back((t % 3 == 0) ? 0.f : 1.f);
    }
  }
  return r;
}

// sum_i w[i] * loss[i] of one forward (the dropout seed fixed at 7): the
// scalar whose gradient the finite-difference tests check.
inline double loss_of(GptModel& m, const TokenBatch& b, const std::vector<float>& w, bool training = true) {
  m.forward(b, 7, training);
  double s = 0;
  for (size_t i = 0; i < w.size(); ++i) s += static_cast<double>(w[i]) * m.losses()[i];
  return s;
}

// An MoE model's sum_i w_i loss_i + (auxiliary losses) * N: what backward
// differentiates with aux_loss_scale = 1 (Megatron's per-token-loss scaling:
// the router's N tokens times a token group of one). *routing (if set)
// receives the routing fingerprint.
inline double moe_total_loss(GptModel& m, const TokenBatch& b, const std::vector<float>& w,
                             uint64_t* routing = nullptr) {
  const double l = loss_of(m, b, w, true);
  const AuxLosses aux = m.aux_losses();
  if (routing) *routing = aux.routing_hash;
  return l + aux.weighted * static_cast<double>(b.B * b.T);
}

// The central difference of moe_total_loss in *x with step eps (*x restored),
// or nullopt when either side routes otherwise than `routing`: routing is
// piecewise constant, and a flipped top-k choice or capacity drop has no
// derivative to compare.
inline std::optional<double> routed_central_difference(GptModel& m, const TokenBatch& b, const std::vector<float>& w,
                                                       float* x, float eps, uint64_t routing) {
  const float saved = *x;
  uint64_t r_up = 0, r_down = 0;
  *x = saved + eps;
  const double up = moe_total_loss(m, b, w, &r_up);
  *x = saved - eps;
  const double down = moe_total_loss(m, b, w, &r_down);
  *x = saved;
  if (r_up != routing || r_down != routing) return std::nullopt;
  return (up - down) / (2.0 * eps);
}

}  // namespace mtrain::model::testing
