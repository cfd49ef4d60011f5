// A Hugging Face model directory on disk, in mtrain's terms:
//
//   <dir>/config.json                      Llama / Qwen2 (hf_config.h)
//   <dir>/model.safetensors                one file, or
//   <dir>/model.safetensors.index.json     {"weight_map": {tensor: file}} and
//   <dir>/model-0000i-of-0000n.safetensors the shards it names
//
// HfModelReader reads such a directory as a WeightSource: Megatron-core
// names, full shapes with mtrain's padded vocabulary rows, any block, so
// `--model <dir>` loads under any TP/PP layout and `mtrain export --to_mcore`
// converts it. write_hf_model writes one from full mtrain tensors (`mtrain
// export --to_hf`). Tensor names and layouts: hf_layout.h.
//
// The directory is untrusted input: open() checks config.json, the index and
// every file's header, and that every tensor the architecture needs is there
// once with its shape and a float dtype and nothing unknown is, before any
// data is read. Errors are CheckpointError naming the file and the tensor.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/dtype.h"
#include "checkpoint/hf_config.h"
#include "checkpoint/hf_layout.h"
#include "checkpoint/model_meta.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/weight_source.h"
#include "common/file_system.h"

namespace mtrain::checkpoint {

inline constexpr const char* kHfConfigFile = "config.json";
inline constexpr const char* kHfSingleFile = "model.safetensors";
inline constexpr const char* kHfIndexFile = "model.safetensors.index.json";

class HfModelReader final : public WeightSource {
 public:
  // Opens <dir> (see above). padded_vocab: the rows mtrain's embedding and
  // output layer have (0 = HF vocab_size); rows past vocab_size read as zeros.
  // A single model.safetensors is preferred over an index, as in transformers.
  static HfModelReader open(FileSystem& fs, const std::string& dir, int64_t padded_vocab = 0);

  HfModelReader(HfModelReader&&) noexcept;
  HfModelReader& operator=(HfModelReader&&) noexcept;
  ~HfModelReader() override;

  const HfModelShape& shape() const { return shape_; }
  const std::string& dir() const { return dir_; }
  // The safetensors files read, in name order (for messages).
  std::vector<std::string> files() const;
  // The mtrain tensors this directory supplies, in HF order. A tied model
  // lists no output_layer.weight, although has() answers true for it.
  std::vector<std::string> names() const;

  std::string describe() const override { return dir_; }
  // Every parameter of the shape's model. For a tied model also
  // "output_layer.weight": the last pipeline stage's copy of the tied
  // embedding (mtrain's model registers it when the embedding lives on
  // another stage) reads model.embed_tokens.weight.
  bool has(const std::string& name) const override;
  Shape global_shape(const std::string& name) const override;
  // Assembles the whole mtrain tensor (QKV / gate-up fused, padding rows
  // zero) and copies the block. The last assembled tensor is kept, so the
  // per-rank slices of one tensor read the files once. Thread-safe.
  void read_block(const std::string& name, const std::vector<int64_t>& offsets, const Shape& shape,
                  float* out) const override;
  // The whole tensor (read_block of everything).
  std::vector<float> read_full(const std::string& name) const;

 private:
  struct Location {
    size_t file = 0;                   // index into files_
    const TensorInfo* info = nullptr;  // owned by files_[file]
  };
  struct Cache;
  HfModelReader();
  void open_weight_files(FileSystem& fs);
  void index_tensor(size_t file, const TensorInfo& info);
  void check_complete() const;
  HfTensorMap map_for(const std::string& name) const;
  std::vector<float> assemble(const HfTensorMap& m) const;

  std::string dir_;
  HfModelShape shape_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Location> hf_tensors_;  // HF tensor name -> where it is
  std::unique_ptr<Cache> cache_;                // the last assembled tensor
};

// Gives the whole mtrain tensor `mcore_name` (row-major, its full shape with
// padded_vocab rows for the vocabulary tensors).
using HfTensorFetch = std::function<std::vector<float>(const std::string& mcore_name)>;

struct HfWriteResult {
  std::vector<std::string> files;  // safetensors files written, in order
  int64_t tensors = 0;             // HF tensors written
  int64_t bytes = 0;               // all files written (config, index, weights)
};

// Writes the HF directory of `shape` at `dir`: config.json (torch_dtype =
// out_dtype), model.safetensors, or model-0000i-of-0000n.safetensors plus the
// index when the tensors exceed max_shard_bytes (hf_layout.h's greedy plan).
// HF names and order, q/k/v and gate/up split per query group, padding rows
// dropped; out_dtype F32, BF16 or F16 (fp32 rounded to nearest even). Each
// file carries transformers' {"format": "pt"} metadata. Everything is
// written under <dir>.tmp-hf and renamed to <dir> at the end, so <dir>
// appears complete or not at all; <dir> must be absent or empty. Directories
// 0750, files 0640. Throws CheckpointError (I/O failures included).
HfWriteResult write_hf_model(FileSystem& fs, const std::string& dir, const HfModelShape& shape,
                             const HfTensorFetch& fetch, int64_t max_shard_bytes, StDType out_dtype);

// CheckpointError unless `dir` is absent or an empty directory (conversions never overwrite).
void require_new_output_dir(FileSystem& fs, const std::string& dir);

// The HF shape of a checkpoint's model: Qwen3 with qk_layernorm, Qwen2 with add_qkv_bias, else Llama;
// HF vocab_size = the unpadded vocab_size, padded_vocab = padded_vocab_size;
// dtype from params_dtype. Throws CheckpointError naming the setting HF
// Llama/Qwen2 cannot express (LayerNorm, no SwiGLU, learned_absolute
// positions, add_bias_linear) or a shape config.json rules refuse.
HfModelShape hf_shape_from_meta(const ModelMeta& m);
// The ModelMeta of an HF model: padded_vocab_size = shape.mcore_vocab(),
// params_dtype from the HF dtype (fp32 / bf16 / fp16).
ModelMeta meta_from_hf_shape(const HfModelShape& s);

}  // namespace mtrain::checkpoint
