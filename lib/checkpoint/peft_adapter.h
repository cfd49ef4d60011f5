// Hugging Face PEFT LoRA adapters <-> mtrain's Megatron-core adapters: the
// tensor names, the fused-layer split and adapter_config.json. A PEFT adapter
// directory is what PEFT's save_pretrained writes for a Llama/Qwen2 model:
//
//   <dir>/adapter_config.json        LoraConfig (peft_type LORA, r, lora_alpha, target_modules, ...)
//   <dir>/adapter_model.safetensors  the adapter tensors, the adapter name ("default") stripped:
//
//   mtrain                                           PEFT
//   decoder.layers.N.self_attention.linear_qkv       base_model.model.model.layers.N.self_attn.{q,k,v}_proj
//     .lora_A.weight (r, C)                            .lora_A.weight (r, C) each: the same matrix
//     .lora_B.weight (G*(R+2)*D, r)                    .lora_B.weight (H*D | G*D, r): rows per query group
//   ...linear_proj / linear_fc2 .lora_{A,B}.weight   ...self_attn.o_proj / mlp.down_proj .lora_{A,B}.weight
//   ...mlp.linear_fc1 .lora_A / .lora_B [gate; up]   ...mlp.{gate,up}_proj .lora_A (shared) / .lora_B (halves)
//   embedding.word_embeddings.weight (modules_to_save) base_model.model.model.embed_tokens.weight
//   output_layer.weight (modules_to_save)            base_model.model.lm_head.weight
//   decoder.layers.N.mlp.router.weight (modules_to_save) base_model.model.model.layers.N.mlp.gate.weight
//   biases (lora_bias all)                           their HF names under base_model.model.
//
// Why the split is exact: the fused layer adds s * B (A x), one A for all of
// its rows. PEFT's q_proj adds s * B_q (A_q x); with A_q = A_k = A_v = A and
// B_q, B_k, B_v the fused B's rows of each projection (hf_layout.h's
// per-group order), every output row gets the same delta as in the fused
// layer. The reverse needs equal A's: q/k/v (gate/up) adapters trained
// independently in PEFT have different A's, which one fused A of rank r
// cannot express (it would take rank 3r) -- refused, naming the tensors.
// A projection without an adapter in the PEFT file gets B = 0 (no delta).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/hf_layout.h"
#include "common/file_system.h"

namespace mtrain::checkpoint {

inline constexpr const char* kPeftConfigFile = "adapter_config.json";
inline constexpr const char* kPeftWeightsFile = "adapter_model.safetensors";
inline constexpr const char* kPeftPrefix = "base_model.model.";

// The LoraConfig fields mtrain reads and writes (the others keep PEFT's defaults).
struct PeftLoraConfig {
  int64_t r = 8;
  double lora_alpha = 8;
  double lora_dropout = 0;
  bool use_rslora = false;
  std::string bias = "none";                 // none | all (lora_only is refused)
  std::vector<std::string> target_modules;   // HF projection names, sorted; or
  std::string target_regex;                  // a whole-name regex when the layers differ
  std::vector<std::string> modules_to_save;  // embed_tokens, lm_head, gate (an MoE router)
  std::string base_model_name_or_path;
};

// adapter_config.json text as PEFT writes it (every LoraConfig key, sorted).
std::string peft_config_json(const PeftLoraConfig& c);
// Parses and validates adapter_config.json from `source`. Throws
// CheckpointError naming the file and the field for what mtrain cannot
// represent: peft_type other than LORA, use_dora, rank_pattern / alpha_pattern
// non-empty, fan_in_fan_out, bias lora_only, layers_to_transform /
// layer_replication, target modules that are not decoder projections.
PeftLoraConfig parse_peft_config(const std::string& text, const std::string& source);

// One mtrain adapter, modules_to_save or bias tensor and its PEFT tensors.
struct PeftTensorMap {
  HfTensorMap hf;         // hf_names carry the PEFT names; lora_B / fc1 split like the base weight
  bool shared_a = false;  // a fused layer's lora_A: copied to every part
};
// Throws CheckpointError naming the tensor when it is not a tensor of `s`
// (r: the adapter rank, for the lora_A / lora_B shapes).
PeftTensorMap peft_map_for_mcore(const std::string& mcore_name, const HfModelShape& s, int64_t r);
// Whole tensors through a map (fp32, bit for bit).
std::vector<std::vector<float>> peft_tensor_to_hf(const PeftTensorMap& m, const std::vector<float>& mcore);

// The adapter tensors of a PEFT directory as mtrain tensors (full shapes,
// padded vocabulary rows zero), checked against `s` before any data is read.
struct PeftAdapter {
  PeftLoraConfig config;
  std::map<std::string, std::vector<float>> tensors;  // mtrain name -> values
};
PeftAdapter read_peft_adapter(FileSystem& fs, const std::string& dir, const HfModelShape& s);

// Writes <dir>/adapter_config.json and adapter_model.safetensors (fp32,
// {"format": "pt"}) from mtrain tensors; `dir` must be new or empty; written
// under <dir>.tmp-peft and renamed, so it appears complete or not at all.
// Returns the bytes written.
int64_t write_peft_adapter(FileSystem& fs, const std::string& dir, const HfModelShape& s, PeftLoraConfig config,
                           const std::map<std::string, std::vector<float>>& tensors);

}  // namespace mtrain::checkpoint
