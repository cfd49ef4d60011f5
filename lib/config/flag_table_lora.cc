// Flag table, LoRA part (--train_type lora): Megatron-SWIFT's tuner flags,
// with its defaults. The adapter-loading, merging and variant flags swift
// also accepts are listed so they are refused by name (unsupported.cc).
#include "config/flag_table_parts.h"

namespace mtrain::config::detail {

namespace {
constexpr auto T = FlagGroup::kLora;
}  // namespace

std::vector<FlagSpec> lora_flags() {
  return {
      {.name = "lora_rank", .field = &Args::lora_rank, .group = T, .help = "LoRA rank r of every adapter."},
      {.name = "lora_alpha",
       .field = &Args::lora_alpha,
       .group = T,
       .help = "LoRA alpha: the adapter output is scaled by alpha / r (alpha / sqrt(r) with --use_rslora)."},
      {.name = "lora_dropout",
       .field = &Args::lora_dropout,
       .group = T,
       .help = "Dropout on the adapter's input (training only)."},
      {.name = "lora_bias",
       .field = &Args::lora_bias,
       .group = T,
       .help = "none, or all: every bias of the base model trains too (PEFT bias=\"all\").",
       .choices = {"none", "all"}},
      {.name = "use_rslora",
       .field = &Args::use_rslora,
       .group = T,
       .help = "Rank-stabilised LoRA: scale by alpha / sqrt(r)."},
      {.name = "target_modules",
       .field = &Args::target_modules,
       .group = T,
       .help = "Linears that get an adapter: all-linear, Megatron names (linear_qkv linear_proj linear_fc1 "
               "linear_fc2) or Hugging Face names (q_proj k_proj v_proj -> linear_qkv, o_proj -> linear_proj, "
               "gate_proj up_proj -> linear_fc1, down_proj -> linear_fc2; the whole fused layer is adapted). On an MoE "
               "model linear_fc1/linear_fc2 are every expert's and the shared expert's; the router is no target."},
      {.name = "target_regex",
       .field = &Args::target_regex,
       .group = T,
       .help = "Regular expression over whole module names (e.g. decoder.layers.0.self_attention.linear_qkv); "
               "overrides --target_modules."},
      {.name = "modules_to_save",
       .field = &Args::modules_to_save,
       .group = T,
       .help = "Modules trained in full next to the adapters: word_embeddings, output_layer, position_embeddings, "
               "all-embedding, router (an MoE model's routers)."},
      {.name = "adapter_load",
       .field = &Args::adapter_load,
       .group = T,
       .help = "Start the adapters (and modules_to_save) from a Hugging Face PEFT directory or an mtrain LoRA "
               "checkpoint, on top of the base (--model, --load --finetune, or the init); needs the adapter's "
               "--lora_rank / --lora_alpha.",
       .aliases = {"mcore_adapter"}},
      {.name = "merge_lora",
       .field = &Args::merge_lora,
       .group = T,
       .help = "Merge the adapters into the base weights (not supported yet)."},
      {.name = "lora_dtype",
       .field = &Args::lora_dtype,
       .group = T,
       .help = "Adapter dtype (not supported: adapters keep fp32 master weights)."},
      {.name = "use_dora", .field = &Args::use_dora, .group = T, .help = "DoRA adapters (not supported)."},
      {.name = "lorap_lr_ratio",
       .field = &Args::lorap_lr_ratio,
       .group = T,
       .help = "LoRA+ learning-rate ratio of B (not supported)."},
      {.name = "init_weights",
       .field = &Args::init_weights,
       .group = T,
       .help = "LoRA initialisation: true (PEFT's default: A Kaiming-uniform, B zero); the variants are not "
               "supported."},
  };
}

}  // namespace mtrain::config::detail
