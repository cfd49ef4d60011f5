// The model's side of the MoE layer (ARCHITECTURE.md: experts are layers):
// the parameters of an MoE layer under Megatron-core's names with global
// expert indices (decoder.layers.N.mlp.router.weight,
// decoder.layers.N.mlp.experts.local_experts.<e>.linear_fc1.weight, ...,
// decoder.layers.N.mlp.shared_experts.gate_weight), its activations, and the
// call that replaces the dense MLP in layer_forward / layer_backward. The
// layer itself is lib/moe/moe_layer.h.
#pragma once

#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/params.h"
#include "moe/moe_layer.h"

namespace mtrain::model {

// Parameter indices of one MoE layer in the ParamStore (-1 = absent).
struct MoeLayerParams {
  int router_w = -1, expert_bias = -1;
  std::vector<int> fc1_w, fc1_b, fc2_w, fc2_b;  // per local expert, in expert order
  int shared_fc1 = -1, shared_fc2 = -1, shared_gate = -1;
  // LoRA (lora_layer.h, add_moe_adapters): per local expert, and the shared expert's fc1, fc2.
  std::vector<AdapterParams> fc1_lora, fc2_lora;
  AdapterParams shared_lora[2];
};

// The MoE layer's settings on this rank.
moe::MoeLayerConfig moe_layer_config(const ModelConfig& c);

// Registers the parameters of MoE layer `prefix` ("decoder.layers.N."), all
// of a layer's experts back to back (one block of the flat buffer).
void add_moe_params(ParamStore& ps, const ModelConfig& c, const std::string& prefix, MoeLayerParams& mp);

// The addresses the MoE layer reads and accumulates into; T, seed and
// training set up the shared expert's adapter dropout (lora_layer.h).
moe::MoeWeights moe_weights(const ModelConfig& c, ParamStore& ps, const MoeLayerParams& mp, int64_t T, uint64_t seed,
                            bool training);

// The routers' auxiliary losses of one forward, summed over MoE layers (the
// logged values are moe::RouterLossTracker's, GptModel::take_aux_log).
struct AuxLosses {
  // What backward differentiates: sum of coeff * loss (z-loss coefficient
  // divided by the token group's size, as Megatron's router does).
  double weighted = 0;
  // A fingerprint of every routing decision (expert ids and kept slots):
  // equal fingerprints mean the piecewise-constant routing did not change.
  uint64_t routing_hash = 1469598103934665603ULL;
};
void add_aux_losses(AuxLosses& sum, const moe::RouterForward& route, const moe::RouterConfig& cfg);

}  // namespace mtrain::model
