// The config.json of a Hugging Face Llama / Qwen2 / Qwen2-MoE / Mixtral
// causal-LM directory: its
// parse and validation, and the Megatron model flags it implies. It lives in
// lib/config because `mtrain sft --model <dir>` takes the model shape from
// it (Megatron-SWIFT 4 does the same); lib/checkpoint's HF import/export
// (checkpoint/hf_config.h) builds on the same parser, so a config.json is
// judged by one set of rules everywhere.
//
// Errors are ConfigError "<source>: <what>" naming the field in config.json
// spelling (lib/checkpoint rethrows them as CheckpointError).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mtrain::config {

enum class HfArch { kLlama, kQwen2, kQwen2Moe, kMixtral };

const char* hf_arch_class(HfArch arch);  // "LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen2MoeForCausalLM", ...
const char* hf_model_type(HfArch arch);  // "llama", "qwen2", "qwen2_moe", "mixtral"
// "LlamaForCausalLM, Qwen2ForCausalLM, ...": for error messages.
std::string hf_supported_architectures();
bool hf_arch_is_moe(HfArch arch);

// The mixture-of-experts fields of Qwen2-MoE and Mixtral (num_experts 0: a
// dense architecture). transformers' modeling code: every MoE layer has a
// router `gate` (E, C) and E SwiGLU experts; Qwen2-MoE adds a shared expert
// whose output is scaled by sigmoid(shared_expert_gate . x).
struct HfMoeFields {
  int64_t num_experts = 0;     // num_experts (Qwen2-MoE) / num_local_experts (Mixtral)
  int64_t topk = 0;            // num_experts_per_tok
  int64_t ffn = 0;             // moe_intermediate_size (Mixtral: intermediate_size)
  int64_t shared_ffn = 0;      // shared_expert_intermediate_size (Qwen2-MoE; 0 for Mixtral)
  bool norm_topk_prob = true;  // renormalise the top-k probabilities (Mixtral always does)
  std::vector<int> layers;     // per layer, 1 = MoE: decoder_sparse_step and mlp_only_layers (Mixtral: all)
  double aux_loss_coef = 0.0;  // router_aux_loss_coef
  bool qkv_bias = true;        // Qwen2-MoE's qkv_bias (absent before transformers 5: always true)
};

// Qwen2-MoE's decoder_sparse_step and mlp_only_layers for a per-layer MoE
// pattern: layer i is MoE iff i is not in mlp_only_layers and (i + 1) %
// step == 0. The step that needs the fewest mlp_only_layers (the smallest
// such step on a tie), so the configs transformers writes come back as written.
struct HfSparseLayers {
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
};
HfSparseLayers hf_sparse_layers(const std::vector<int>& moe_layers);

// The fields of config.json mtrain uses (config.json names in the comments).
struct HfConfigFields {
  HfArch arch = HfArch::kLlama;  // architectures[0]; Qwen2 = Llama + q/k/v biases
  int64_t num_layers = 0;        // num_hidden_layers
  int64_t hidden = 0;            // hidden_size
  int64_t ffn = 0;               // intermediate_size
  int64_t heads = 0;             // num_attention_heads
  int64_t groups = 0;            // num_key_value_heads (= heads when absent)
  int64_t head_dim = 0;          // head_dim (= hidden / heads when absent)
  int64_t vocab_size = 0;        // vocab_size: embedding rows in the HF files
  int64_t max_positions = 0;     // max_position_embeddings
  double rms_norm_eps = 1e-6;    // rms_norm_eps
  double rope_theta = 10000.0;   // rope_theta
  bool tie_word_embeddings = false;
  std::string torch_dtype = "float32";  // torch_dtype or dtype: float32 | bfloat16 | float16
  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> eos_token_id;
  HfMoeFields moe;  // Qwen2MoeForCausalLM, MixtralForCausalLM

  bool qkv_bias() const { return arch == HfArch::kQwen2 || (arch == HfArch::kQwen2Moe && moe.qkv_bias); }
};

// Non-positive sizes, num_attention_heads not divisible by
// num_key_value_heads, odd head_dim (RoPE rotates halves), Qwen2 with
// head_dim != hidden / heads, non-positive rms_norm_eps / rope_theta, an
// unknown torch_dtype, MoE fields out of range (top-k above the expert
// count, a pattern not one 0/1 per layer, Mixtral with a dense layer):
// ConfigError naming the first bad field.
void validate_hf_config(const HfConfigFields& f, const std::string& source);

// Parses and validates config.json text. Required: architectures (one of
// hf_supported_architectures()), hidden_size, intermediate_size,
// num_attention_heads, num_hidden_layers, vocab_size,
// max_position_embeddings, rms_norm_eps. Optional with transformers'
// defaults: num_key_value_heads, head_dim, rope_theta (10000),
// tie_word_embeddings (false), torch_dtype / dtype (float32). Features
// mtrain does not model are refused by name: hidden_act other than silu,
// rope_scaling, Llama's attention_bias / mlp_bias, Qwen2's and Qwen2-MoE's
// use_sliding_window, Mixtral's sliding_window and router_jitter_noise.
// Qwen3-MoE is refused naming its q/k RMSNorm.
HfConfigFields parse_hf_config_fields(const std::string& json_text, const std::string& source = "config.json");

// <dir>/config.json, parsed. ConfigError naming the path when it is missing
// or unreadable (with a hint that a local model directory is needed).
HfConfigFields read_hf_model_dir_config(const std::string& dir);

// A model flag and the value a config.json implies for it.
struct HfImpliedFlag {
  std::string flag;      // canonical flag name, e.g. "num_query_groups"
  std::string value;     // as typed on a command line, e.g. "2"
  std::string hf_field;  // the config.json field it comes from, for messages
  std::string hf_value;  // that field's value as written there
  bool shape = true;     // false: an explicit flag may override it (it fixes no tensor's shape or layout)
};

// The Megatron model flags of an HF model: num_layers, hidden_size,
// ffn_hidden_size, num_attention_heads, group_query_attention,
// num_query_groups, kv_channels, vocab_size, normalization RMSNorm, swiglu,
// position_embedding_type rope, untie_embeddings_and_output_weights,
// add_bias_linear false, add_qkv_bias (Qwen2), and the overridable
// max_position_embeddings, norm_epsilon, rotary_base. MoE architectures add
// num_experts, moe_ffn_hidden_size, moe_router_topk, moe_layer_freq,
// moe_shared_expert_intermediate_size, moe_shared_expert_gate,
// moe_router_score_function softmax, moe_router_pre_softmax (= not
// norm_topk_prob, as Megatron-SWIFT maps it) and the overridable
// moe_aux_loss_coeff (router_aux_loss_coef).
std::vector<HfImpliedFlag> hf_implied_flags(const HfConfigFields& f);

}  // namespace mtrain::config
