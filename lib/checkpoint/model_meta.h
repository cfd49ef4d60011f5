// The model shape a checkpoint records (state JSON key "model"), in
// Megatron's argument names. A load compares it with the model being built
// and refuses a mismatch naming both values (Megatron's check_checkpoint_args);
// `mtrain export --to_hf` builds config.json from it. Plain numbers, no
// lib/model dependency: lib/train fills it from a ModelConfig.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace mtrain::checkpoint {

struct ModelMeta {
  int64_t num_layers = 0;
  int64_t hidden_size = 0;
  int64_t ffn_hidden_size = 0;
  int64_t num_attention_heads = 0;
  int64_t num_query_groups = 0;
  int64_t kv_channels = 0;        // head dim
  int64_t vocab_size = 0;         // tokenizer vocabulary (before padding)
  int64_t padded_vocab_size = 0;  // rows of the embedding / output layer in this checkpoint
  int64_t max_position_embeddings = 0;
  std::string normalization = "RMSNorm";  // or "LayerNorm"
  bool swiglu = true;
  std::string position_embedding_type = "rope";  // or "learned_absolute"
  bool untie_embeddings_and_output_weights = true;
  bool add_bias_linear = false;
  bool add_qkv_bias = false;
  double norm_epsilon = 1e-5;
  double rotary_base = 10000;
  std::string params_dtype = "fp32";  // fp32 | bf16 | fp16: what the training run computed in
  // Mixture of experts (absent in dense checkpoints and in those of mtrain
  // before MoE: num_experts 0). moe_layers: one 0/1 per layer, 1 = MoE
  // (--moe_layer_freq expanded, so "1" and "[1,1]" compare equal).
  int64_t num_experts = 0;
  int64_t moe_ffn_hidden_size = 0;
  std::vector<int> moe_layers;
  int64_t moe_shared_expert_intermediate_size = 0;
  bool moe_shared_expert_gate = false;
  // The router (what `export --to_hf` writes as num_experts_per_tok,
  // norm_topk_prob, router_aux_loss_coef; not compared on load: Megatron
  // resumes under other router flags). nullopt topk: a checkpoint from
  // before they were recorded.
  std::optional<int64_t> moe_router_topk;
  bool moe_router_pre_softmax = false;
  std::string moe_router_score_function = "softmax";
  double moe_router_topk_scaling_factor = 0;  // 0: none
  bool moe_router_enable_expert_bias = false;
  double moe_aux_loss_coeff = 0;
};

nlohmann::json model_meta_to_json(const ModelMeta& m);
// Throws CheckpointError naming `source` and the field when a field is missing or has the wrong type.
ModelMeta model_meta_from_json(const nlohmann::json& j, const std::string& source);

// The fields that fix the tensors' shapes and meaning, where `saved` and
// `current` differ: "num_layers value from checkpoint (4) is not equal to the
// input argument value (8)", one line each (empty: compatible). vocab sizes
// compare unpadded; padded rows may differ (TP changes the padding).
std::vector<std::string> model_meta_mismatches(const ModelMeta& saved, const ModelMeta& current);

}  // namespace mtrain::checkpoint
