// One decoder layer (pre-norm): x2 = x + dropout(proj(attn(norm1(x))) + b_o),
// out = x2 + dropout(fc2(act(fc1(norm2(x2)))) + b_2), as one tensor-parallel
// rank runs it: qkv and fc1 are column-parallel, proj and fc2 row-parallel
// (lib/parallel/tensor_parallel.h), this rank holds H/tp heads, G/tp query
// groups and F/tp of the FFN. N = B*T tokens; N_loc = N, or N/tp with sequence
// parallelism (the norms, dropouts and residuals then see a token shard).
// The layer owns no memory: weights come from the ParamStore, saved
// activations from a LayerActs slot, temporaries from the shared Workspace.
// Buffers are sized for (B, T) = (micro batch, seq length) and used for any
// smaller (B, T).
#pragma once

#include <cstdint>
#include <memory>

#include "model/model_config.h"
#include "model/moe_block.h"
#include "model/params.h"
#include "parallel/tensor_parallel.h"
#include "tensor/tensor.h"

namespace mtrain::model {

// A micro-batch as the model sees it (all arrays B*T, row-major (B, T)).
struct TokenBatch {
  int64_t B = 0, T = 0;
  const int32_t* tokens = nullptr;
  const int32_t* targets = nullptr;    // next tokens; may be null for inference
  const int32_t* positions = nullptr;  // per-token positions (restart per packed sample)
  const int32_t* doc_ids = nullptr;    // may be null: plain causal mask
  // The weight each token loss gets in backward (Megatron's per-token loss:
  // loss scale / loss tokens of the global batch), from which auxiliary
  // losses (MoE load balancing) take their gradient scale. 0: auxiliary
  // losses give no gradient.
  float aux_loss_scale = 0.f;
};

// The layer's four linears, in lora::linear_layer_names() order.
enum LinearSite : int { kSiteQkv = 0, kSiteProj = 1, kSiteFc1 = 2, kSiteFc2 = 3, kNumLinearSites = 4 };

// Parameter indices of one layer in the ParamStore (-1 = absent).
struct LayerParams {
  int ln1_w = -1, ln1_b = -1, qkv_w = -1, qkv_b = -1, proj_w = -1, proj_b = -1;
  int ln2_w = -1, ln2_b = -1, fc1_w = -1, fc1_b = -1, fc2_w = -1, fc2_b = -1;
  int q_ln_w = -1, q_ln_b = -1, k_ln_w = -1, k_ln_b = -1;  // --qk_layernorm (model/qk_norm.h)
  // LoRA adapters per linear (lora_layer.h)
  int lora_a[kNumLinearSites] = {-1, -1, -1, -1};
  int lora_b[kNumLinearSites] = {-1, -1, -1, -1};
  // An MoE layer (--num_experts, --moe_layer_freq): the MLP is moe::MoeLayer
  // and fc1_w / fc2_w are absent.
  std::shared_ptr<const MoeLayerParams> moe;
};

// Saved activations of one layer; shapes in comments, N = B*T, H, G, F and
// QKV are this rank's shares.
struct LayerActs {
  Tensor ln1;                 // (N_loc, C) norm1 output
  Tensor ln1_mean, ln1_rstd;  // (N_loc) (mean only for LayerNorm)
  Tensor q;                   // (B, H, T, D) after RoPE
  Tensor k, v;                // (B, G, T, D) k after RoPE
  // --qk_layernorm: q (B, H, T, D) and k (B, G, T, D) before their norm, its
  // rstd (B*H*T), (B*G*T) and, for LayerNorm, mean.
  Tensor q_pre, k_pre, q_norm_mean, q_norm_rstd, k_norm_mean, k_norm_rstd;
  Tensor att;                 // (B, H, T, D) attention output per head
  Tensor merged;              // (N, H*D) heads merged
  Tensor softmax_stats;       // flash: lse (B, H, T); unfused: probs (B, H, T, T) unless selective recompute
  Tensor x2;                  // (N_loc, C) residual after attention
  Tensor ln2;                 // (N_loc, C)
  Tensor ln2_mean, ln2_rstd;  // (N_loc)
  Tensor fc1;                 // (N, F or 2F) pre-activation
  Tensor act;                 // (N, F)
  // LoRA: (N, r) adapter activation A dropout(x) per linear
  Tensor lora_h[kNumLinearSites];
  std::unique_ptr<moe::MoeActs> moe;  // MoE layers: what the MoE MLP keeps
};

// Temporaries shared by all layers (forward and backward).
struct Workspace {
  Tensor qkv;       // (N, QKV) forward projection output / backward dqkv
  Tensor probs;     // (B, H, T, T) recomputed probs under selective recompute (unfused only)
  Tensor d_ln;      // (N_loc, C)
  Tensor d_proj;    // (N_loc, C) row-parallel output / its gradient
  Tensor d_merged;  // (N, H*D)
  Tensor d_att;     // (B, H, T, D)
  Tensor d_q;       // (B, H, T, D)
  Tensor d_k, d_v;  // (B, G, T, D)
  Tensor d_qk_pre;  // --qk_layernorm: (B, H, T, D) then (B, G, T, D), grads before the q/k norms
  Tensor d_fc1;     // (N, F or 2F)
  Tensor d_act;     // (N, F)
  Tensor full_in;   // sequence parallel: (N, C) all-gathered norm output (column-parallel input)
  Tensor full_out;  // sequence parallel: (N, C) buffer of reduce-scatters and gathered gradients
  Tensor scratch;   // kernel scratch for unfused paths, attention tiles
  // Context parallelism (cp > 1): the ring's two blocks in flight, each
  // (4, B, G, T, D) k | v | dk | dv; their document ids (2, B, T) int32 in
  // fp32 slots; one block's softmax output (B, H, T, D) and lse (B, H, T).
  Tensor ring_travel, ring_docs, ring_block_out, ring_block_lse;
  // Ulysses (cp > 1): whole-sequence buffers of this rank's H/cp heads,
  // (4, B, H/cp, cp*T, D) q | out | dout | dq and (4, B, G/cp, cp*T, D)
  // k | v | dk | dv; the all-to-all's send and receive blocks (2, B*H*T*D);
  // gathered document ids (2, B, cp*T) int32 in fp32 slots.
  Tensor ulysses_heads, ulysses_groups, ulysses_pack, ulysses_docs;
  // LoRA: (N, r) adapter gradient; (N, max(C, H*D, F)) dropout(x) / d(x) of an adapter
  Tensor lora_dh;
  Tensor lora_scratch;
  std::unique_ptr<moe::MoeWorkspace> moe;  // when the model has MoE layers
};

// layer: the global layer number, which says dense or MoE; -1 (the recompute
// buffer shared by recomputed layers): whatever kinds the model has.
void allocate_layer_acts(LayerActs& a, const ModelConfig& c, device::Device& dev, bool meta, int slot,
                         int64_t layer = -1);
void allocate_workspace(Workspace& w, const ModelConfig& c, device::Device& dev, bool meta);

// One layer's key/value cache for inference (model/kv_cache.h): k and v
// (G_loc, capacity, D) after RoPE, `past` rows per group already filled;
// scores: capacity floats of scratch.
struct KvLayerCache {
  float* k = nullptr;
  float* v = nullptr;
  int64_t capacity = 0;
  int64_t past = 0;
  float* scores = nullptr;
};

// x (N_loc, C) -> out (N_loc, C). `seed` selects this layer's dropout masks.
// With `kv` (inference, B = 1, no dropout): the batch's T tokens follow the
// kv->past cached ones; their keys and values are appended to the cache and
// attention reads the whole cache (the caller advances `past`).
void layer_forward(const ModelConfig& c, const parallel::TpConfig& tp, ParamStore& ps, const LayerParams& lp,
                   LayerActs& a, Workspace& w, const float* x, float* out, const TokenBatch& b, uint64_t seed,
                   bool training, const KvLayerCache* kv = nullptr);
// dres (N_loc, C) holds d(out) on entry and d(x) on exit; weight grads accumulate into ps.
void layer_backward(const ModelConfig& c, const parallel::TpConfig& tp, ParamStore& ps, const LayerParams& lp,
                    LayerActs& a, Workspace& w, const float* x, float* dres, const TokenBatch& b, uint64_t seed,
                    bool training);

}  // namespace mtrain::model
