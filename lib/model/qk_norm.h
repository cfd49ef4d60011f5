// --qk_layernorm (Megatron-core's q_layernorm / k_layernorm, Qwen3's q_norm /
// k_norm): the model's norm (RMSNorm or LayerNorm, --norm_epsilon) over the
// head dimension D of every query and key head, after the QKV projection and
// before RoPE. The weights (D) are shared by all heads and replicated over TP;
// a TP rank sees only its heads, so their gradients are partial and summed over
// the TP group before the optimizer (Megatron's _allreduce_layernorm_grads
// does this for q_layernorm / k_layernorm whenever TP > 1).
#pragma once

#include <cstdint>
#include <string>

#include "model/model_config.h"
#include "model/params.h"
#include "model/transformer_layer.h"

namespace mtrain::model {

// Registers decoder.layers.N.self_attention.{q,k}_layernorm.{weight,bias} under
// prefix "decoder.layers.N." (bias for LayerNorm only); nothing without --qk_layernorm.
void add_qk_norm_params(ParamStore& ps, const ModelConfig& c, const std::string& prefix, LayerParams& lp);
// The saved pre-norm q/k and their statistics; `tag` prefixes the buffer names.
void allocate_qk_norm_acts(LayerActs& a, const ModelConfig& c, device::Device& dev, bool meta, const std::string& tag);
// The gradient buffer of the pre-norm q and k.
void allocate_qk_norm_workspace(Workspace& w, const ModelConfig& c, device::Device& dev, bool meta);
// Kernel scratch the unfused RMSNorm path needs for (B, T) rows of H query heads (0 if none).
int64_t qk_norm_scratch_floats(const ModelConfig& c, int64_t B, int64_t H, int64_t T, int64_t D);

// Where the QKV split writes queries and keys: a.q_pre / a.k_pre with
// --qk_layernorm (qk_norm_forward then fills a.q / a.k), else a.q / a.k.
float* qk_split_query(const ModelConfig& c, LayerActs& a);
float* qk_split_key(const ModelConfig& c, LayerActs& a);

// a.q (B, H, T, D) = norm(a.q_pre), a.k (B, G, T, D) = norm(a.k_pre), per
// (b, head, t) row; probe modules q_layernorm and k_layernorm. Nothing without --qk_layernorm.
void qk_norm_forward(const ModelConfig& c, ParamStore& ps, const LayerParams& lp, LayerActs& a, int64_t B, int64_t T,
                     float* scratch);
// From d(normed q) in w.d_q and d(normed k) in w.d_k: returns d(pre-norm q)
// and d(pre-norm k) (in w.d_qk_pre) and accumulates the weight gradients.
// Without --qk_layernorm: w.d_q and w.d_k themselves.
struct QkGrads {
  const float* dq;  // (B, H, T, D)
  const float* dk;  // (B, G, T, D)
};
QkGrads qk_norm_backward(const ModelConfig& c, ParamStore& ps, const LayerParams& lp, LayerActs& a, Workspace& w,
                         int64_t B, int64_t T, float* scratch);

}  // namespace mtrain::model
