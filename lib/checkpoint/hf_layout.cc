// HF <-> mtrain tensor names and layout conversion (see hf_layout.h for the table).
#include "checkpoint/hf_layout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "common/errors.h"

namespace mtrain::checkpoint {

namespace {

constexpr const char* kMcoreLayers = "decoder.layers.";
constexpr const char* kHfLayers = "model.layers.";
constexpr const char* kEmbedding = "embedding.word_embeddings.weight";
constexpr const char* kFinalNorm = "decoder.final_layernorm.weight";
constexpr const char* kOutput = "output_layer.weight";
constexpr const char* kHfEmbedding = "model.embed_tokens.weight";
constexpr const char* kHfNorm = "model.norm.weight";
constexpr const char* kHfHead = "lm_head.weight";

enum class LayerKind { kNorm1, kQkvWeight, kQkvBias, kProj, kNorm2, kFc1, kFc2 };

// One per-layer tensor: its suffix after "decoder.layers.N." and its HF suffixes after "model.layers.N.".
struct LayerTensor {
  LayerKind kind;
  const char* mcore;
  HfTransform transform;
  std::array<const char*, 3> hf;
  int parts;
};

constexpr LayerTensor kLayerTensors[] = {
    {LayerKind::kNorm1, "input_layernorm.weight", HfTransform::kCopy, {"input_layernorm.weight"}, 1},
    {LayerKind::kQkvWeight,
     "self_attention.linear_qkv.weight",
     HfTransform::kQkvSplit,
     {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"},
     3},
    {LayerKind::kQkvBias,
     "self_attention.linear_qkv.bias",
     HfTransform::kQkvSplit,
     {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"},
     3},
    {LayerKind::kProj, "self_attention.linear_proj.weight", HfTransform::kCopy, {"self_attn.o_proj.weight"}, 1},
    {LayerKind::kNorm2, "pre_mlp_layernorm.weight", HfTransform::kCopy, {"post_attention_layernorm.weight"}, 1},
    {LayerKind::kFc1,
     "mlp.linear_fc1.weight",
     HfTransform::kGateUpSplit,
     {"mlp.gate_proj.weight", "mlp.up_proj.weight"},
     2},
    {LayerKind::kFc2, "mlp.linear_fc2.weight", HfTransform::kCopy, {"mlp.down_proj.weight"}, 1},
};

// In an MoE layer the experts (hf_moe_layer_maps) replace the dense MLP's fc1 / fc2.
bool present(const LayerTensor& t, int64_t layer, const HfModelShape& s) {
  if (t.kind == LayerKind::kFc1 || t.kind == LayerKind::kFc2) return !s.is_moe_layer(layer);
  return t.kind != LayerKind::kQkvBias || s.qkv_bias();
}

// (mcore shape, hf shapes) of a per-layer tensor.
void layer_shapes(const LayerTensor& t, const HfModelShape& s, Shape& mcore, std::vector<Shape>& hf) {
  const int64_t C = s.hidden, F = s.ffn;
  switch (t.kind) {
    case LayerKind::kNorm1:
    case LayerKind::kNorm2:
      mcore = {C}, hf = {{C}};
      return;
    case LayerKind::kQkvWeight:
      mcore = {s.qkv_rows(), C}, hf = {{s.q_rows(), C}, {s.kv_rows(), C}, {s.kv_rows(), C}};
      return;
    case LayerKind::kQkvBias:
      mcore = {s.qkv_rows()}, hf = {{s.q_rows()}, {s.kv_rows()}, {s.kv_rows()}};
      return;
    case LayerKind::kProj:
      mcore = {C, s.q_rows()}, hf = {mcore};
      return;
    case LayerKind::kFc1:
      mcore = {2 * F, C}, hf = {{F, C}, {F, C}};
      return;
    case LayerKind::kFc2:
      mcore = {C, F}, hf = {mcore};
      return;
  }
}

HfTensorMap layer_map(const LayerTensor& t, int64_t layer, const HfModelShape& s) {
  HfTensorMap m;
  const std::string n = std::to_string(layer);
  m.mcore_name = kMcoreLayers + n + "." + t.mcore;
  m.transform = t.transform;
  for (int i = 0; i < t.parts; ++i) m.hf_names.push_back(kHfLayers + n + "." + t.hf[i]);
  layer_shapes(t, s, m.mcore_shape, m.hf_shapes);
  if (t.transform == HfTransform::kQkvSplit) m.heads = s.heads, m.groups = s.groups, m.head_dim = s.head_dim;
  return m;
}

HfTensorMap vocab_map(const char* mcore, const char* hf, const HfModelShape& s) {
  HfTensorMap m;
  m.mcore_name = mcore;
  m.mcore_shape = {s.mcore_vocab(), s.hidden};
  m.transform = HfTransform::kVocabRows;
  m.hf_names = {hf};
  m.hf_shapes = {{s.vocab_size, s.hidden}};
  return m;
}

HfTensorMap final_norm_map(const HfModelShape& s) {
  return HfTensorMap{kFinalNorm, {s.hidden}, HfTransform::kCopy, {kHfNorm}, {{s.hidden}}};
}

// "12.rest" after a layer prefix -> (12, "rest"); only canonical decimal layer numbers below num_layers.
std::optional<std::pair<int64_t, std::string>> split_layer(const std::string& name, const char* prefix,
                                                           const HfModelShape& s) {
  const size_t plen = std::strlen(prefix);
  if (name.compare(0, plen, prefix) != 0) return std::nullopt;
  const size_t dot = name.find('.', plen);
  if (dot == std::string::npos) return std::nullopt;
  const std::string digits = name.substr(plen, dot - plen);
  int64_t layer = -1;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), layer);
  if (ec != std::errc() || end != digits.data() + digits.size() || std::to_string(layer) != digits) return std::nullopt;
  if (layer < 0 || layer >= s.num_layers)
    throw CheckpointError(
        fmt::format("tensor '{}' is for layer {}, but the model has {} layers", name, layer, s.num_layers));
  return std::make_pair(layer, name.substr(dot + 1));
}

std::string shape_text(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

void check_size(const std::string& name, const Shape& shape, size_t actual) {
  if (static_cast<int64_t>(actual) != shape_numel(shape))
    throw CheckpointError(fmt::format("tensor '{}' has {} values, expected shape {} ({} values)", name, actual,
                                      shape_text(shape), shape_numel(shape)));
}

int64_t columns(const Shape& shape) { return shape.size() == 2 ? shape[1] : 1; }

}  // namespace

std::vector<HfTensorMap> hf_tensor_maps(const HfModelShape& s) {
  std::vector<HfTensorMap> maps{vocab_map(kEmbedding, kHfEmbedding, s)};
  for (int64_t layer = 0; layer < s.num_layers; ++layer) {
    for (const LayerTensor& t : kLayerTensors)
      if (present(t, layer, s)) maps.push_back(layer_map(t, layer, s));
    if (s.is_moe_layer(layer))
      for (HfTensorMap& m : hf_moe_layer_maps(layer, s)) maps.push_back(std::move(m));
  }
  maps.push_back(final_norm_map(s));
  if (!s.tie_word_embeddings) maps.push_back(vocab_map(kOutput, kHfHead, s));
  return maps;
}

HfTensorMap hf_map_for_mcore(const std::string& mcore_name, const HfModelShape& s) {
  if (mcore_name == kEmbedding) return vocab_map(kEmbedding, kHfEmbedding, s);
  if (mcore_name == kFinalNorm) return final_norm_map(s);
  if (mcore_name == kOutput) {
    if (!s.tie_word_embeddings) return vocab_map(kOutput, kHfHead, s);
    HfTensorMap m = vocab_map(kOutput, kHfEmbedding, s);
    m.tied_copy = true;
    return m;
  }
  if (const auto layer = split_layer(mcore_name, kMcoreLayers, s)) {
    for (const LayerTensor& t : kLayerTensors)
      if (layer->second == t.mcore && present(t, layer->first, s)) return layer_map(t, layer->first, s);
    if (s.is_moe_layer(layer->first))
      for (HfTensorMap& m : hf_moe_layer_maps(layer->first, s))
        if (m.mcore_name == mcore_name) return m;
  }
  throw CheckpointError(
      fmt::format("tensor '{}' has no counterpart in a Hugging Face {} model", mcore_name, hf_arch_class(s.arch)),
      "HF export supports RMSNorm + SwiGLU + RoPE models without linear biases (q/k/v biases: "
      "Qwen2ForCausalLM; experts: Qwen2MoeForCausalLM, MixtralForCausalLM)");
}

std::optional<HfSource> hf_source_for(const std::string& hf_name, const HfModelShape& s) {
  if (hf_name == kHfEmbedding) return HfSource{kEmbedding, 0};
  if (hf_name == kHfNorm) return HfSource{kFinalNorm, 0};
  if (hf_name == kHfHead) {
    if (s.tie_word_embeddings) return std::nullopt;  // some tied exports store it; the embeddings win
    return HfSource{kOutput, 0};
  }
  if (const auto layer = split_layer(hf_name, kHfLayers, s)) {
    if (layer->second == "self_attn.rotary_emb.inv_freq") return std::nullopt;  // a buffer older transformers saved
    for (const LayerTensor& t : kLayerTensors) {
      if (!present(t, layer->first, s)) continue;
      for (int i = 0; i < t.parts; ++i)
        if (layer->second == t.hf[i]) return HfSource{kMcoreLayers + std::to_string(layer->first) + "." + t.mcore, i};
    }
    if (s.is_moe_layer(layer->first))
      for (const HfTensorMap& m : hf_moe_layer_maps(layer->first, s))
        for (size_t i = 0; i < m.hf_names.size(); ++i)
          if (m.hf_names[i] == hf_name) return HfSource{m.mcore_name, static_cast<int>(i)};
  }
  throw CheckpointError(fmt::format("unexpected tensor '{}': not a parameter of {}", hf_name, hf_arch_class(s.arch)));
}

// ---- Layout kernels ---------------------------------------------------------------------------

void qkv_to_hf(float* q, float* k, float* v, const float* qkv, int64_t heads, int64_t groups, int64_t head_dim,
               int64_t cols) {
  const int64_t R = heads / groups, block = head_dim * cols;  // one head's rows
  for (int64_t g = 0; g < groups; ++g) {
    const float* src = qkv + g * (R + 2) * block;
    std::memcpy(q + g * R * block, src, R * block * sizeof(float));
    std::memcpy(k + g * block, src + R * block, block * sizeof(float));
    std::memcpy(v + g * block, src + (R + 1) * block, block * sizeof(float));
  }
}

void qkv_from_hf(float* qkv, const float* q, const float* k, const float* v, int64_t heads, int64_t groups,
                 int64_t head_dim, int64_t cols) {
  const int64_t R = heads / groups, block = head_dim * cols;
  for (int64_t g = 0; g < groups; ++g) {
    float* dst = qkv + g * (R + 2) * block;
    std::memcpy(dst, q + g * R * block, R * block * sizeof(float));
    std::memcpy(dst + R * block, k + g * block, block * sizeof(float));
    std::memcpy(dst + (R + 1) * block, v + g * block, block * sizeof(float));
  }
}

void gate_up_to_hf(float* gate, float* up, const float* fc1, int64_t ffn, int64_t cols) {
  std::memcpy(gate, fc1, ffn * cols * sizeof(float));
  std::memcpy(up, fc1 + ffn * cols, ffn * cols * sizeof(float));
}

void gate_up_from_hf(float* fc1, const float* gate, const float* up, int64_t ffn, int64_t cols) {
  std::memcpy(fc1, gate, ffn * cols * sizeof(float));
  std::memcpy(fc1 + ffn * cols, up, ffn * cols * sizeof(float));
}

std::vector<std::vector<float>> tensor_to_hf(const HfTensorMap& m, std::span<const float> mcore) {
  check_size(m.mcore_name, m.mcore_shape, mcore.size());
  std::vector<std::vector<float>> out;
  for (const Shape& shape : m.hf_shapes) out.emplace_back(static_cast<size_t>(shape_numel(shape)));
  const int64_t cols = columns(m.mcore_shape);
  switch (m.transform) {
    case HfTransform::kCopy:
    case HfTransform::kVocabRows:  // the first vocab_size rows
      std::copy_n(mcore.data(), out[0].size(), out[0].data());
      break;
    case HfTransform::kQkvSplit:
      qkv_to_hf(out[0].data(), out[1].data(), out[2].data(), mcore.data(), m.heads, m.groups, m.head_dim, cols);
      break;
    case HfTransform::kGateUpSplit:
      gate_up_to_hf(out[0].data(), out[1].data(), mcore.data(), m.hf_shapes[0][0], cols);
      break;
  }
  return out;
}

std::vector<float> tensor_from_hf(const HfTensorMap& m, const std::vector<std::span<const float>>& hf_parts) {
  if (hf_parts.size() != m.hf_names.size())
    throw CheckpointError(fmt::format("tensor '{}' needs {} Hugging Face tensors, got {}", m.mcore_name,
                                      m.hf_names.size(), hf_parts.size()));
  for (size_t i = 0; i < hf_parts.size(); ++i) check_size(m.hf_names[i], m.hf_shapes[i], hf_parts[i].size());
  std::vector<float> out(static_cast<size_t>(shape_numel(m.mcore_shape)), 0.0f);  // vocab padding rows stay zero
  const int64_t cols = columns(m.mcore_shape);
  switch (m.transform) {
    case HfTransform::kCopy:
    case HfTransform::kVocabRows:
      std::copy(hf_parts[0].begin(), hf_parts[0].end(), out.begin());
      break;
    case HfTransform::kQkvSplit:
      qkv_from_hf(out.data(), hf_parts[0].data(), hf_parts[1].data(), hf_parts[2].data(), m.heads, m.groups, m.head_dim,
                  cols);
      break;
    case HfTransform::kGateUpSplit:
      gate_up_from_hf(out.data(), hf_parts[0].data(), hf_parts[1].data(), m.hf_shapes[0][0], cols);
      break;
  }
  return out;
}

void check_hf_shape(const HfTensorMap& m, int part, const Shape& actual, const std::string& source) {
  const Shape& want = m.hf_shapes.at(static_cast<size_t>(part));
  if (actual != want)
    throw CheckpointError(fmt::format("{}: tensor '{}' has shape {}, expected {}", source, m.hf_names[part],
                                      shape_text(actual), shape_text(want)),
                          "config.json and the weights disagree, or the tensor belongs to another model");
}

// ---- Sharded HF directory ---------------------------------------------------------------------

std::string hf_shard_file_name(int index, int count) {
  if (count == 1) return "model.safetensors";
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", index, count);
}

HfShardPlan plan_hf_shards(const std::vector<HfShardTensor>& tensors, int64_t max_shard_bytes) {
  if (max_shard_bytes <= 0)
    throw CheckpointError(fmt::format("max shard size must be positive, got {}", max_shard_bytes));
  if (tensors.empty()) throw CheckpointError("a Hugging Face model directory needs at least one tensor");
  HfShardPlan plan;
  std::set<std::string> seen;
  int64_t open_bytes = 0;  // of plan.tensors.back(), while it accepts more
  bool open = false;
  for (const HfShardTensor& t : tensors) {
    if (!seen.insert(t.name).second) throw CheckpointError(fmt::format("tensor '{}' is listed twice", t.name));
    if (t.bytes < 0) throw CheckpointError(fmt::format("tensor '{}' has a negative size {}", t.name, t.bytes));
    plan.total_size += t.bytes;
    if (t.bytes > max_shard_bytes) {  // alone in a file larger than the limit, as transformers does
      plan.tensors.push_back({t.name});
      open = false;
      continue;
    }
    if (!open || open_bytes + t.bytes > max_shard_bytes) {
      plan.tensors.emplace_back();
      open_bytes = 0;
      open = true;
    }
    plan.tensors.back().push_back(t.name);
    open_bytes += t.bytes;
  }
  const int count = static_cast<int>(plan.tensors.size());
  for (int i = 0; i < count; ++i) {
    plan.files.push_back(hf_shard_file_name(i + 1, count));
    for (const std::string& name : plan.tensors[i]) plan.weight_map[name] = plan.files.back();
  }
  return plan;
}

std::string hf_index_json(const HfShardPlan& plan) {
  nlohmann::json j;
  j["metadata"]["total_size"] = plan.total_size;
  j["weight_map"] = plan.weight_map;
  return j.dump(2) + "\n";
}

std::map<std::string, std::string> parse_hf_index(const std::string& json_text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(source + ": not valid JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw CheckpointError(source + ": missing field 'weight_map' (an object: tensor name -> file name)");
  std::map<std::string, std::string> out;
  for (const auto& [name, file] : j["weight_map"].items()) {
    const std::string f = file.is_string() ? file.get<std::string>() : "";
    const bool plain = !f.empty() && f.find_first_of("/\\") == std::string::npos && f != "." && f != "..";
    if (!plain || !f.ends_with(".safetensors"))
      throw CheckpointError(
          fmt::format("{}: tensor '{}' maps to {}, not a .safetensors file name in the model directory", source, name,
                      file.dump()));
    out[name] = f;
  }
  if (out.empty()) throw CheckpointError(source + ": field 'weight_map' lists no tensors");
  return out;
}

int64_t parse_shard_size(const std::string& text) {
  static const std::pair<const char*, double> kUnits[] = {
      {"KIB", 1024.0}, {"MIB", 1048576.0}, {"GIB", 1073741824.0}, {"TIB", 1099511627776.0},
      {"KB", 1e3},     {"MB", 1e6},        {"GB", 1e9},           {"TB", 1e12},
      {"B", 1.0}};
  const auto bad = [&] {
    return ConfigError(fmt::format("max_shard_size: '{}' is not a size", text),
                       "examples: 5GB (5 * 10^9 bytes), 500MB, 2GiB (2 * 2^30 bytes), 1000000");
  };
  size_t digits_end = 0;
  while (digits_end < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[digits_end])) || text[digits_end] == '.'))
    ++digits_end;
  if (digits_end == 0) throw bad();
  std::string unit = text.substr(digits_end);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double multiplier = unit.empty() ? 1.0 : 0.0;
  for (const auto& [name, factor] : kUnits)
    if (unit == name) multiplier = factor;
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + digits_end, value);
  if (multiplier == 0 || ec != std::errc() || end != text.data() + digits_end) throw bad();
  const double bytes = std::floor(value * multiplier);
  if (!(bytes >= 1) || bytes > static_cast<double>(std::numeric_limits<int64_t>::max() / 2)) throw bad();
  return static_cast<int64_t>(bytes);
}

}  // namespace mtrain::checkpoint
