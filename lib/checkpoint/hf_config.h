// Hugging Face config.json for the Llama, Qwen2, Qwen2-MoE and Mixtral causal-LM architectures:
// HfModelShape, the few numbers mtrain's HF import/export works from (no
// lib/model dependency: the exporter fills it from a checkpoint's ModelMeta,
// the importer from a config.json), the config.json text for a shape, and the
// parse and validation of a config.json from an untrusted model directory.
// The parse and the field rules are lib/config's (config/hf_model_config.h,
// shared with `--model <dir>`); here their errors become CheckpointError
// naming the source and the field.
//
// Vocabulary rows: HF's vocab_size is the number of rows of embed_tokens and
// lm_head in the HF files (it may exceed the tokenizer's size, as Qwen2.5's
// 151936 rows for 151665 tokens do). mtrain pads its rows to a multiple of
// make_vocab_size_divisible_by * TP (padded_vocab). Export writes the first
// vocab_size rows and drops the padding rows; import appends zero rows up to
// padded_vocab. See hf_layout.h for the tensors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "config/hf_model_config.h"
#include "tensor/tensor.h"

namespace mtrain::checkpoint {

// The architectures and their names (lib/config).
using config::hf_arch_class;
using config::hf_arch_is_moe;
using config::hf_model_type;
using config::hf_supported_architectures;
using config::HfArch;
using config::HfMoeFields;

struct HfModelShape {
  HfArch arch = HfArch::kLlama;  // architectures[0]; Qwen2 = Llama + q/k/v biases
  int64_t num_layers = 0;        // num_hidden_layers
  int64_t hidden = 0;            // hidden_size (C)
  int64_t ffn = 0;               // intermediate_size (F)
  int64_t heads = 0;             // num_attention_heads (H)
  int64_t groups = 0;            // num_key_value_heads (G)
  int64_t head_dim = 0;          // head_dim (D); hidden / heads when config.json has none
  int64_t vocab_size = 0;        // vocab_size: rows in the HF files
  int64_t padded_vocab = 0;      // rows in mtrain, >= vocab_size; 0 = vocab_size (not in config.json)
  int64_t max_positions = 0;     // max_position_embeddings
  double rms_norm_eps = 1e-6;    // rms_norm_eps
  double rope_theta = 10000.0;   // rope_theta
  bool tie_word_embeddings = false;
  DType dtype = DType::kF32;  // torch_dtype: the dtype of the tensors in the HF files
  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> eos_token_id;
  HfMoeFields moe;  // Qwen2-MoE, Mixtral: experts, top-k, MoE layers (num_experts 0: dense)

  bool qkv_bias() const { return arch == HfArch::kQwen2 || (arch == HfArch::kQwen2Moe && moe.qkv_bias); }
  bool is_moe_layer(int64_t layer) const {
    return moe.num_experts > 0 && layer >= 0 && layer < static_cast<int64_t>(moe.layers.size()) && moe.layers[layer];
  }
  int64_t mcore_vocab() const { return padded_vocab > 0 ? padded_vocab : vocab_size; }
  int64_t q_rows() const { return heads * head_dim; }            // q_proj / o_proj^T rows
  int64_t kv_rows() const { return groups * head_dim; }          // k_proj, v_proj rows
  int64_t qkv_rows() const { return q_rows() + 2 * kv_rows(); }  // mtrain's fused linear_qkv rows
};

// Throws CheckpointError naming the first bad field (config.json spelling):
// non-positive sizes, num_attention_heads not divisible by
// num_key_value_heads, odd head_dim (RoPE rotates halves), padded_vocab <
// vocab_size, non-positive rms_norm_eps / rope_theta.
void validate_hf_shape(const HfModelShape& s, const std::string& source = "config.json");

// config.json text (2-space indent, trailing newline) for a valid shape.
// Writes head_dim explicitly; Qwen2 requires head_dim == hidden / heads
// because older transformers releases derive it.
std::string hf_config_json(const HfModelShape& s);

// Parses and validates config.json text. Required: architectures (one of
// hf_supported_architectures()), hidden_size, intermediate_size,
// num_attention_heads, num_hidden_layers, vocab_size,
// max_position_embeddings, rms_norm_eps. Optional with transformers'
// defaults: num_key_value_heads (= heads), head_dim (= hidden / heads),
// rope_theta (10000), tie_word_embeddings (false), torch_dtype or dtype
// (float32). Features mtrain does not model are refused by name: hidden_act
// other than silu, rope_scaling, Llama's attention_bias / mlp_bias, Qwen2's
// use_sliding_window. padded_vocab is left 0 (the caller pads).
HfModelShape parse_hf_config(const std::string& json_text, const std::string& source = "config.json");

}  // namespace mtrain::checkpoint
