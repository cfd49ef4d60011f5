// The model's side of LoRA (ARCHITECTURE.md: adapters are layers): which
// parameters a --train_type lora job trains, the adapter parameters of a
// decoder layer's four linears (under PEFT's names on mcore modules, e.g.
// decoder.layers.3.self_attention.linear_qkv.lora_A.weight), and the call
// that adds an adapter to a base linear's forward or backward. The TP
// algebra is lib/lora/lora_linear.h; nothing here runs without --train_type lora.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lora/lora_linear.h"
#include "model/model_config.h"
#include "model/params.h"
#include "model/transformer_layer.h"
#include "parallel/tensor_parallel.h"

namespace mtrain::model {

// Adapter dropout streams, apart from the layer's other dropout sites:
// + LinearSite for a layer's four linears (an MoE layer's shared expert
// takes fc1's and fc2's), + 4 and + 5 for its routed experts' fc1 and fc2.
inline constexpr uint64_t kSiteLoraDropout = 16;

// Registers the adapters of layer `prefix` ("decoder.layers.N.") for the
// linears c.lora targets, into lp.lora_a / lora_b (an MoE layer: attention
// only). A is Kaiming-uniform and B zero (PEFT), so the adapted model starts
// equal to the base.
void add_layer_adapters(ParamStore& ps, const ModelConfig& c, const std::string& prefix, LayerParams& lp);

// Registers `module`.lora_A / lora_B of a linear with full input width `in`
// and output width `out`, split over `tp` ranks as a column-parallel
// (A replicated, B by rows in `parts` blocks) or row-parallel (A by
// columns, B replicated) base. Not in the base; replicated halves count in
// the norm on TP rank 0.
AdapterParams add_adapter(ParamStore& ps, const ModelConfig& c, const std::string& module, int64_t in, int64_t out,
                          bool column, int parts, int64_t tp);

// The adapters of MoE layer `prefix`: each routed expert's fc1 and fc2 (named
// by global expert index, split over EP and ETP like the expert weights, see
// moe/expert_lora.h) and the shared expert's (split over TP like the dense
// MLP's), for the linears c.lora targets (moe_lora.cc).
void add_moe_adapters(ParamStore& ps, const ModelConfig& c, const std::string& prefix, MoeLayerParams& mp);
// Fills w's adapter addresses (moe_block.h, moe_weights).
void add_moe_adapter_weights(moe::MoeWeights& w, const ModelConfig& c, ParamStore& ps, const MoeLayerParams& mp,
                             int64_t T, uint64_t seed, bool training);

// The adapter of site s (its dropout stream; a.A null when ap has none).
lora::AdapterWeights adapter_weights(const ModelConfig& c, ParamStore& ps, AdapterParams ap, LinearSite s, int64_t T,
                                     uint64_t seed, bool training);

// Every linear of the model LoRA could adapt (all layers), by module name:
// a dense layer's four, an MoE layer's attention pair, each expert's
// linear_fc1 / linear_fc2 and the shared expert's.
std::vector<std::string> adaptable_linears(const ModelConfig& c);

// Under LoRA, freezes every parameter but the adapters, modules_to_save and
// (--lora_bias all) the biases. No-op for full training.
void mark_trainable(ParamStore& ps, const ModelConfig& c);

// Decoder linears of the whole model (all layers, not only this rank's) that
// get an adapter; throws ConfigError when LoRA is on and none does.
int64_t count_adapted_linears(const ModelConfig& c);

void allocate_lora_acts(LayerActs& a, const ModelConfig& c, device::Device& dev, bool meta, const std::string& tag);
void allocate_lora_workspace(Workspace& w, const ModelConfig& c, device::Device& dev, bool meta);

// Adds the adapter of `site` (if the layer has one) to the base linear's
// output y (N = B*T tokens, T per sequence): column-parallel sites (qkv, fc1) take x_full (N, C); row-parallel
// ones (proj, fc2) take x (N, IN_local) and add to the reduced y.
void adapter_forward(const ModelConfig& c, const parallel::TpConfig& tp, ParamStore& ps, const LayerParams& lp,
                     LayerActs& a, Workspace& w, LinearSite site, float* y, const float* x, int64_t N, int64_t T,
                     uint64_t seed, bool training);
// Adds the adapter's input gradient to the base's dx (column: reduced, row:
// (N, IN_local)) and accumulates dA, dB. dy: column (N, OUT_local); row the
// output gradient of every token (the base's gathered buffer under SP).
void adapter_backward(const ModelConfig& c, const parallel::TpConfig& tp, ParamStore& ps, const LayerParams& lp,
                      LayerActs& a, Workspace& w, LinearSite site, float* dx, const float* dy, const float* x,
                      int64_t N, int64_t T, uint64_t seed, bool training);

}  // namespace mtrain::model
