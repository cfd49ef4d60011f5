// The config.json of a Hugging Face Llama / Qwen2 causal-LM directory: its
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

// Qwen3 = Llama + per-head q/k RMSNorm (--qk_layernorm), head_dim free of hidden / heads.
enum class HfArch { kLlama, kQwen2, kQwen3 };

const char* hf_arch_class(HfArch arch);  // "LlamaForCausalLM" / "Qwen2ForCausalLM" / "Qwen3ForCausalLM"
const char* hf_model_type(HfArch arch);  // "llama" / "qwen2" / "qwen3"
// "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM": for error messages.
std::string hf_supported_architectures();

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
};

// Non-positive sizes, num_attention_heads not divisible by
// num_key_value_heads, odd head_dim (RoPE rotates halves), Qwen2 with
// head_dim != hidden / heads, non-positive rms_norm_eps / rope_theta, an
// unknown torch_dtype: ConfigError naming the first bad field.
void validate_hf_config(const HfConfigFields& f, const std::string& source);

// Parses and validates config.json text. Required: architectures (one of
// hf_supported_architectures()), hidden_size, intermediate_size,
// num_attention_heads, num_hidden_layers, vocab_size,
// max_position_embeddings, rms_norm_eps. Optional with transformers'
// defaults: num_key_value_heads, head_dim, rope_theta (10000),
// tie_word_embeddings (false), torch_dtype / dtype (float32). Features
// mtrain does not model are refused by name: hidden_act other than silu,
// rope_scaling, Llama's attention_bias / mlp_bias, Qwen3's attention_bias
// (it also puts a bias on o_proj), Qwen2's and Qwen3's use_sliding_window.
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
// add_bias_linear false, add_qkv_bias (Qwen2), qk_layernorm (Qwen3), and the overridable
// max_position_embeddings, norm_epsilon, rotary_base.
std::vector<HfImpliedFlag> hf_implied_flags(const HfConfigFields& f);

}  // namespace mtrain::config
