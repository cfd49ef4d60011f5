// LoraConfig: what a LoRA job adapts and how (Megatron-SWIFT's --train_type
// lora flags, resolved once from config::Args by lib/model). The names it
// matches are Megatron-core module names, e.g.
// "decoder.layers.3.self_attention.linear_qkv", as PEFT matches them on an
// mcore model: a target name selects every module whose name is it or ends
// in "." + it; --target_regex must match the whole module name instead.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mtrain::lora {

struct LoraConfig {
  bool enabled = false;   // --train_type lora
  int64_t rank = 8;       // --lora_rank r
  double alpha = 32;      // --lora_alpha
  float dropout = 0.05f;  // --lora_dropout, on the adapter's input only
  bool rslora = false;    // --use_rslora: scale alpha / sqrt(r) instead of alpha / r
  bool bias_all = false;  // --lora_bias all: every bias of the base trains too (PEFT bias="all")
  // Megatron module names (resolve_target_modules' output); ignored when target_regex is set.
  std::vector<std::string> target_modules;
  std::string target_regex;  // --target_regex (ECMAScript syntax, whole-name match)
  // --modules_to_save: Megatron module names trained in full (resolve_modules_to_save).
  std::vector<std::string> modules_to_save;

  float scaling() const;
  // True if the linear `module` (a full Megatron module name) gets an adapter.
  bool targets(const std::string& module) const;
  // True if the module's own weights train in full (modules_to_save).
  bool saves(const std::string& module) const;
};

// The four linears of a decoder layer LoRA can wrap, as Megatron names them.
inline const std::vector<std::string>& linear_layer_names() {
  static const std::vector<std::string> names = {"linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"};
  return names;
}

// --target_modules as typed -> Megatron module names, as Megatron-SWIFT
// resolves them on an mcore GPT: `all-linear` = every decoder linear (not the
// output layer); Megatron names pass through; Hugging Face projection names
// select the fused layer that holds them (q_proj, k_proj or v_proj ->
// linear_qkv, o_proj -> linear_proj, gate_proj or up_proj -> linear_fc1,
// down_proj -> linear_fc2; naming only q_proj adapts the whole fused qkv, as
// an mcore adapter cannot cover part of a fused weight). Throws ConfigError
// naming an unknown or unsupported name. Result sorted, without duplicates.
std::vector<std::string> resolve_target_modules(const std::vector<std::string>& names);

// --modules_to_save as typed -> module names trained in full: word_embeddings,
// output_layer, position_embeddings, all-embedding (the embeddings), or
// router (every MoE layer's router weight; PEFT's ModulesToSaveWrapper on
// mcore's TopKRouter, which swift's all-linear does not adapt).
// Throws ConfigError for anything else.
std::vector<std::string> resolve_modules_to_save(const std::vector<std::string>& names);

// Throws ConfigError when `regex` does not compile (named as --target_regex).
void check_target_regex(const std::string& regex);

}  // namespace mtrain::lora
