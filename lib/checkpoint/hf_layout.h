// Hugging Face Llama/Qwen2/Qwen2-MoE/Mixtral tensors <-> mtrain's Megatron-core tensors: the
// name mapping, the layout converters and the sharded-index JSON. Pure
// functions on full (unsharded) fp32 tensors; no file I/O (the safetensors
// reader/writer lives in the storage layer).
//
//   mtrain (Megatron-core)                        Hugging Face
//   embedding.word_embeddings.weight (Vp, C)      model.embed_tokens.weight (V, C)        first V rows
//   decoder.layers.N.input_layernorm.weight       model.layers.N.input_layernorm.weight
//   ...self_attention.linear_qkv.weight           ...self_attn.{q,k,v}_proj.weight        per query group
//   ...self_attention.linear_qkv.bias (Qwen2)     ...self_attn.{q,k,v}_proj.bias
//   ...self_attention.linear_proj.weight          ...self_attn.o_proj.weight
//   ...pre_mlp_layernorm.weight                   ...post_attention_layernorm.weight
//   ...mlp.linear_fc1.weight [gate; up]           ...mlp.{gate,up}_proj.weight
//   ...mlp.linear_fc2.weight                      ...mlp.down_proj.weight
//   decoder.final_layernorm.weight                model.norm.weight
//   output_layer.weight (Vp, C)                   lm_head.weight (V, C); absent when tied
//
// Fused QKV rows (Megatron): for each query group g in 0..G-1, R = H / G
// query heads, then its key head, then its value head, D rows each:
//   [q_{gR} .. q_{gR+R-1}, k_g, v_g] x D.
// HF: q_proj rows are heads 0..H-1 (D rows each), k_proj / v_proj rows kv
// heads 0..G-1. RoPE needs no row permutation: mtrain and HF both rotate the
// halves (x_i, x_{i+D/2}) of each head.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/hf_config.h"
#include "tensor/tensor.h"

namespace mtrain::checkpoint {

enum class HfTransform {
  kCopy,         // identical rows and columns
  kVocabRows,    // HF holds the first vocab_size of mtrain's padded_vocab rows
  kQkvSplit,     // fused per-group QKV rows <-> q_proj, k_proj, v_proj
  kGateUpSplit,  // linear_fc1 [gate; up] <-> gate_proj, up_proj
};

// One mtrain tensor and the HF tensor(s) it becomes.
struct HfTensorMap {
  std::string mcore_name;
  Shape mcore_shape;  // full, unsharded; padded vocabulary rows
  HfTransform transform = HfTransform::kCopy;
  std::vector<std::string> hf_names;  // 1, or {gate, up}, or {q, k, v}
  std::vector<Shape> hf_shapes;       // same order as hf_names
  // kQkvSplit only: query heads H, query groups G, head dim D.
  int64_t heads = 0, groups = 0, head_dim = 0;
  // output_layer.weight of a tied model (the last pipeline stage's copy of the
  // word embeddings): not written to HF; on import it is filled from
  // model.embed_tokens.weight, which hf_names then names.
  bool tied_copy = false;
};

// Every tensor of the model in HF order (embeddings, layers 0..L-1, final
// norm, lm_head when untied); the tied copy is not listed.
std::vector<HfTensorMap> hf_tensor_maps(const HfModelShape& s);

// The maps of MoE layer `layer` (router, every expert, Qwen2-MoE's shared
// expert and its gate) in place of the dense fc1 / fc2; see hf_moe_layout.cc
// for the names.
std::vector<HfTensorMap> hf_moe_layer_maps(int64_t layer, const HfModelShape& s);

// The map of one mtrain tensor. Throws CheckpointError naming the tensor if it
// is not a parameter of this shape (unknown name, layer out of range, a bias
// the architecture does not have).
HfTensorMap hf_map_for_mcore(const std::string& mcore_name, const HfModelShape& s);

// Where one HF tensor goes: the mtrain tensor and the index into its
// hf_names. nullopt for tensors HF directories may hold that mtrain does not
// use (lm_head.weight of a tied model, model.layers.N.self_attn.rotary_emb.inv_freq).
// Throws CheckpointError naming the tensor for anything else.
struct HfSource {
  std::string mcore_name;
  int part = 0;
};
std::optional<HfSource> hf_source_for(const std::string& hf_name, const HfModelShape& s);

// ---- Layout kernels: outputs, then inputs, then sizes. Row-major; `cols` = C for weights, 1 for biases. ----

// qkv (G*(R+2)*D, cols) -> q (H*D, cols), k (G*D, cols), v (G*D, cols).
void qkv_to_hf(float* q, float* k, float* v, const float* qkv, int64_t heads, int64_t groups, int64_t head_dim,
               int64_t cols);
// The inverse.
void qkv_from_hf(float* qkv, const float* q, const float* k, const float* v, int64_t heads, int64_t groups,
                 int64_t head_dim, int64_t cols);
// fc1 (2F, cols) = [gate; up] -> gate (F, cols), up (F, cols); and the inverse.
void gate_up_to_hf(float* gate, float* up, const float* fc1, int64_t ffn, int64_t cols);
void gate_up_from_hf(float* fc1, const float* gate, const float* up, int64_t ffn, int64_t cols);

// Whole tensors through a map. The span sizes are checked against the shapes
// (CheckpointError naming the tensor). To HF: the parts in hf_names order.
// From HF: kVocabRows appends zero rows up to padded_vocab.
std::vector<std::vector<float>> tensor_to_hf(const HfTensorMap& m, std::span<const float> mcore);
std::vector<float> tensor_from_hf(const HfTensorMap& m, const std::vector<std::span<const float>>& hf_parts);
// Before reading: CheckpointError "<source>: tensor '<hf name>' has shape [..], expected [..]" on a mismatch.
void check_hf_shape(const HfTensorMap& m, int part, const Shape& actual, const std::string& source);

// ---- Sharded HF directory: model.safetensors or model-0000i-of-0000n.safetensors + index ----

struct HfShardTensor {
  std::string name;
  int64_t bytes = 0;  // data bytes in the file's dtype
};
struct HfShardPlan {
  std::vector<std::string> files;                 // in writing order
  std::vector<std::vector<std::string>> tensors;  // tensors[i]: file i's tensors, in input order
  std::map<std::string, std::string> weight_map;  // tensor -> file
  int64_t total_size = 0;                         // sum of tensor data bytes (HF's metadata.total_size)
};

// "model.safetensors" when count == 1, else "model-00001-of-00003.safetensors" (1-based, 5 digits as HF).
std::string hf_shard_file_name(int index, int count);
// Greedy, in input order: a file is closed when the next tensor would take it
// past max_shard_bytes; a tensor larger than the limit gets a file of its own.
// Throws CheckpointError on duplicate names, negative sizes or max_shard_bytes <= 0.
HfShardPlan plan_hf_shards(const std::vector<HfShardTensor>& tensors, int64_t max_shard_bytes);
// model.safetensors.index.json: {"metadata": {"total_size": N}, "weight_map": {name: file}} (sorted keys).
// transformers writes it only for more than one file; a single model.safetensors needs none.
std::string hf_index_json(const HfShardPlan& plan);
// Parses an index from an untrusted directory: weight_map -> tensor->file.
// Refuses file names that are not plain names in the directory ("/", "\\", "..").
std::map<std::string, std::string> parse_hf_index(const std::string& json_text,
                                                  const std::string& source = "model.safetensors.index.json");
// transformers' --max_shard_size spelling: "5GB" (10^9), "500MB", "2GiB" (2^30), "1KB", or plain bytes.
int64_t parse_shard_size(const std::string& text);

}  // namespace mtrain::checkpoint
