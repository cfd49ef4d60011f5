// Small Hugging Face model directories written by the tests themselves:
// config.json from a shape and one model.safetensors with random weights in
// HF names and order (with transformers' {"format": "pt"} metadata), and an
// edit hook that lets a test drop, reshape, retype or add tensors first.
// Used by tests/checkpoint and tests/apps (mtrain export).
#pragma once

#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/dtype.h"
#include "checkpoint/hf_config.h"
#include "checkpoint/hf_layout.h"
#include "checkpoint/hf_model_dir.h"
#include "checkpoint/safetensors.h"
#include "common/atomic_file.h"
#include "common/file_system.h"

namespace mtrain::checkpoint::testing {

// 2 layers, head dim 4, hidden = heads * 4, ffn 24, 50 vocabulary rows.
inline HfModelShape tiny_hf_shape(HfArch arch, bool tied, int64_t heads = 4, int64_t groups = 2) {
  HfModelShape s;
  s.arch = arch;
  s.num_layers = 2;
  s.head_dim = 4;
  s.heads = heads;
  s.groups = groups;
  s.hidden = heads * s.head_dim;
  s.ffn = 24;
  s.vocab_size = 50;
  s.max_positions = 128;
  s.rms_norm_eps = 1e-6;
  s.rope_theta = 1e6;
  s.tie_word_embeddings = tied;
  return s;
}

// A tiny mixture of experts: 4 experts of 8, top-2. Qwen2-MoE: a shared
// expert of 12 with its gate, q/k/v biases, layer 1 dense (mlp_only_layers
// [1], its MLP of ffn 24), norm_topk_prob false. Mixtral: every layer MoE,
// intermediate_size = the experts' 8, top-2 renormalised.
inline HfModelShape tiny_moe_hf_shape(HfArch arch, int64_t vocab = 50) {
  HfModelShape s = tiny_hf_shape(arch, false);
  s.vocab_size = vocab;
  s.moe.num_experts = 4;
  s.moe.topk = 2;
  s.moe.ffn = 8;
  if (arch == HfArch::kMixtral) {
    s.ffn = 8;
    s.moe.layers = {1, 1};
    s.moe.aux_loss_coef = 0.02;
  } else {
    s.moe.shared_ffn = 12;
    s.moe.layers = {1, 0};
    s.moe.norm_topk_prob = false;
    s.moe.aux_loss_coef = 0.001;
  }
  return s;
}

// One tensor of a test HF file: values are fp32, stored as `dtype`.
struct HfTestTensor {
  std::string name;
  Shape shape;
  std::vector<float> values;
  StDType dtype = StDType::kF32;
};

// The value a float has after a round trip through `dtype`.
inline float stored_value(float x, StDType dtype) {
  if (dtype == StDType::kBF16) return bf16_bits_to_f32(f32_to_bf16_bits(x));
  if (dtype == StDType::kF16) return f16_bits_to_f32(f32_to_f16_bits(x));
  return x;
}

// The tensors of `s` in HF order with seeded random values, already rounded to `dtype`.
inline std::vector<HfTestTensor> tiny_hf_tensors(const HfModelShape& s, StDType dtype, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<HfTestTensor> out;
  for (const HfTensorMap& m : hf_tensor_maps(s)) {
    for (size_t i = 0; i < m.hf_names.size(); ++i) {
      HfTestTensor t{m.hf_names[i], m.hf_shapes[i],
                     std::vector<float>(static_cast<size_t>(shape_numel(m.hf_shapes[i]))), dtype};
      for (float& x : t.values) x = stored_value(dist(gen), dtype);
      out.push_back(std::move(t));
    }
  }
  return out;
}

// Writes <dir>/config.json (hf_config_json of `s` with torch_dtype = dtype)
// and <dir>/model.safetensors; `edit` may change the tensor list first.
// Returns the tensors written (HF name -> values).
inline std::map<std::string, std::vector<float>> write_tiny_hf_dir(
    FileSystem& fs, const std::string& dir, HfModelShape s, StDType dtype, uint32_t seed,
    const std::function<void(std::vector<HfTestTensor>&)>& edit = {}) {
  std::vector<HfTestTensor> tensors = tiny_hf_tensors(s, dtype, seed);
  if (edit) edit(tensors);
  s.dtype = dtype == StDType::kBF16 ? DType::kBF16 : dtype == StDType::kF16 ? DType::kF16 : DType::kF32;
  fs.create_dirs(dir);
  write_file_atomic(fs, dir + "/config.json", hf_config_json(s));
  std::vector<TensorToWrite> out;
  std::map<std::string, std::vector<float>> values;
  std::vector<std::vector<std::byte>> raw(tensors.size());  // zeros for non-float dtypes
  for (size_t i = 0; i < tensors.size(); ++i) {
    const HfTestTensor& t = tensors[i];
    if (st_dtype_is_float16_or_32(t.dtype)) {
      out.push_back(TensorToWrite::from_f32(t.name, t.shape, t.values.data(), t.dtype));
    } else {
      raw[i].resize(static_cast<size_t>(shape_numel(t.shape) * st_dtype_size(t.dtype)));
      out.push_back(TensorToWrite::from_bytes(t.name, t.dtype, t.shape, raw[i]));
    }
    values[t.name] = t.values;
  }
  write_safetensors(fs, dir + "/model.safetensors", out, {{"format", "pt"}});
  return values;
}

// The whole tensors of `r` as write_hf_model's source.
inline HfTensorFetch fetch_from(const HfModelReader& r) {
  return [&r](const std::string& name) { return r.read_full(name); };
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace mtrain::checkpoint::testing
