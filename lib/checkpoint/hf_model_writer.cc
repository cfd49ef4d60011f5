// write_hf_model and the ModelMeta <-> HfModelShape conversions (hf_model_dir.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <string>
#include <utility>

#include "checkpoint/hf_model_dir.h"
#include "common/atomic_file.h"
#include "common/errors.h"

namespace mtrain::checkpoint {

namespace {

// ModelMeta.params_dtype <-> the HF dtype.
constexpr std::pair<const char*, DType> kParamsDtypes[] = {
    {"fp32", DType::kF32}, {"bf16", DType::kBF16}, {"fp16", DType::kF16}};

DType dtype_of_stored(StDType t) {
  if (t == StDType::kF32) return DType::kF32;
  if (t == StDType::kBF16) return DType::kBF16;
  if (t == StDType::kF16) return DType::kF16;
  throw CheckpointError(fmt::format("cannot write Hugging Face weights as {}", st_dtype_name(t)),
                        "use float32, bfloat16 or float16");
}

// mtrain computes in fp32, so a checkpoint may record eps or theta as a widened float
// (9.999999974752427e-07). The shortest decimal of that float (1e-06) names the same value.
double as_float_decimal(double x) {
  const float f = static_cast<float>(x);
  if (static_cast<double>(f) != x) return x;
  const std::string text = fmt::format("{}", f);
  double shortest = x;
  std::from_chars(text.data(), text.data() + text.size(), shortest);
  return shortest;
}

std::string without_trailing_slashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

// Produces the HF tensors in plan order and writes each file as soon as all of its tensors exist,
// so at most one file's tensors (plus one mtrain tensor's parts) are held in memory.
void write_weight_files(FileSystem& fs, const std::string& dir, const HfShardPlan& plan,
                        const std::vector<HfTensorMap>& maps, const HfTensorFetch& fetch, StDType dtype,
                        HfWriteResult& result) {
  std::map<std::string, Shape> shapes;
  for (const HfTensorMap& m : maps)
    for (size_t i = 0; i < m.hf_names.size(); ++i) shapes[m.hf_names[i]] = m.hf_shapes[i];
  std::map<std::string, std::vector<float>> ready;  // produced, not yet written
  size_t next = 0;
  const auto write_ready_files = [&] {
    for (; next < plan.files.size(); ++next) {
      const std::vector<std::string>& names = plan.tensors[next];
      if (!std::all_of(names.begin(), names.end(), [&](const std::string& n) { return ready.count(n) != 0; })) return;
      std::vector<TensorToWrite> out;
      for (const std::string& n : names)
        out.push_back(TensorToWrite::from_f32(n, shapes.at(n), ready[n].data(), dtype));
      // transformers refuses safetensors files without this metadata.
      const WrittenFile w = write_safetensors(fs, dir + "/" + plan.files[next], out, {{"format", "pt"}});
      result.files.push_back(plan.files[next]);
      result.tensors += static_cast<int64_t>(out.size());
      result.bytes += w.digest.size;
      for (const std::string& n : names) ready.erase(n);
    }
  };
  for (const HfTensorMap& m : maps) {
    std::vector<std::vector<float>> parts = tensor_to_hf(m, fetch(m.mcore_name));
    for (size_t i = 0; i < parts.size(); ++i) ready[m.hf_names[i]] = std::move(parts[i]);
    write_ready_files();
  }
}

[[noreturn]] void refuse_moe(const std::string& setting, const std::string& hint) {
  throw CheckpointError(fmt::format("the checkpoint's MoE model has {}, which neither Qwen2MoeForCausalLM nor "
                                    "MixtralForCausalLM can express",
                                    setting),
                        hint);
}

// The MoE architecture of a checkpoint: a shared expert (with its sigmoid gate)
// is Qwen2-MoE's; without one, no q/k/v biases and every layer MoE with the
// top-k renormalised is Mixtral's. Router settings HF's blocks do not have are
// refused by name.
void moe_shape_from_meta(const ModelMeta& m, HfModelShape& s) {
  if (!m.moe_router_topk)
    throw CheckpointError("the checkpoint's MoE model records no router settings (moe_router_topk)",
                          "it was saved by an mtrain version before Hugging Face MoE export; resume it and save again");
  if (m.moe_router_score_function != "softmax")
    refuse_moe("moe_router_score_function " + m.moe_router_score_function,
               "their routers take a softmax over the experts");
  if (m.moe_router_topk_scaling_factor != 0 && m.moe_router_topk_scaling_factor != 1)
    refuse_moe(fmt::format("moe_router_topk_scaling_factor {}", m.moe_router_topk_scaling_factor),
               "their routers do not scale the top-k weights");
  if (m.moe_router_enable_expert_bias)
    refuse_moe("moe_router_enable_expert_bias true", "their routers have no expert bias");
  HfMoeFields& f = s.moe;
  f.num_experts = m.num_experts;
  f.topk = *m.moe_router_topk;
  f.ffn = m.moe_ffn_hidden_size;
  f.shared_ffn = m.moe_shared_expert_intermediate_size;
  f.norm_topk_prob = !m.moe_router_pre_softmax;
  f.layers = m.moe_layers;
  f.aux_loss_coef = as_float_decimal(m.moe_aux_loss_coeff);
  f.qkv_bias = m.add_qkv_bias;
  if (f.shared_ffn > 0) {
    if (!m.moe_shared_expert_gate)
      refuse_moe("a shared expert without its gate (moe_shared_expert_gate false)",
                 "Qwen2-MoE's shared expert is always scaled by sigmoid(shared_expert_gate . x)");
    s.arch = HfArch::kQwen2Moe;
    return;
  }
  const auto mixtral_needs = [](const std::string& setting) {
    refuse_moe(setting,
               "without a shared expert the model is a Mixtral, which has no q/k/v biases, "
               "makes every layer MoE and renormalises the top-k (--moe_router_pre_softmax false)");
  };
  if (m.add_qkv_bias) mixtral_needs("q/k/v biases and no shared expert");
  if (m.moe_router_pre_softmax) mixtral_needs("moe_router_pre_softmax true and no shared expert");
  if (std::find(m.moe_layers.begin(), m.moe_layers.end(), 0) != m.moe_layers.end())
    mixtral_needs(fmt::format("dense layers (moe_layer_freq [{}]) and no shared expert", fmt::join(m.moe_layers, ",")));
  s.arch = HfArch::kMixtral;
  s.ffn = f.ffn;  // Mixtral's intermediate_size is the experts' size; no dense MLP uses ffn_hidden_size
}

}  // namespace

void require_new_output_dir(FileSystem& fs, const std::string& dir) {
  if (!fs.exists(dir)) return;
  bool empty = false;
  try {
    empty = fs.list_dir(dir).empty();
  } catch (const IoError& e) {
    throw CheckpointError(fmt::format("cannot use the output directory {}: {}", dir, e.what()),
                          "the output must be a new or empty directory");
  }
  if (!empty)
    throw CheckpointError(fmt::format("the output directory {} is not empty", dir),
                          "choose a new directory (nothing is overwritten)");
}

HfWriteResult write_hf_model(FileSystem& fs, const std::string& dir_in, const HfModelShape& shape_in,
                             const HfTensorFetch& fetch, int64_t max_shard_bytes, StDType out_dtype) {
  HfModelShape shape = shape_in;
  shape.dtype = dtype_of_stored(out_dtype);
  const std::string config_text = hf_config_json(shape);  // validates the shape
  const std::string dir = without_trailing_slashes(dir_in);
  require_new_output_dir(fs, dir);
  const std::vector<HfTensorMap> maps = hf_tensor_maps(shape);
  std::vector<HfShardTensor> sizes;
  for (const HfTensorMap& m : maps)
    for (size_t i = 0; i < m.hf_names.size(); ++i)
      sizes.push_back({m.hf_names[i], shape_numel(m.hf_shapes[i]) * st_dtype_size(out_dtype)});
  const HfShardPlan plan = plan_hf_shards(sizes, max_shard_bytes);

  const std::string tmp = dir + ".tmp-hf";
  HfWriteResult result;
  const auto discard_tmp = [&] {
    try {
      fs.remove_all(tmp);
    } catch (const IoError&) {  // best effort: the error being reported matters more
    }
  };
  try {
    fs.remove_all(tmp);  // left by an export that was killed
    fs.create_dirs(tmp, kDefaultDirMode);
    write_file_atomic(fs, tmp + "/" + kHfConfigFile, config_text, kDefaultFileMode);
    result.bytes += static_cast<int64_t>(config_text.size());
    write_weight_files(fs, tmp, plan, maps, fetch, out_dtype, result);
    if (plan.files.size() > 1) {
      const std::string index = hf_index_json(plan);
      write_file_atomic(fs, tmp + "/" + kHfIndexFile, index, kDefaultFileMode);
      result.bytes += static_cast<int64_t>(index.size());
    }
    fs.rename(tmp, dir);
    fs.sync_dir(parent_dir(dir));
  } catch (const IoError& e) {
    discard_tmp();
    throw CheckpointError(fmt::format("cannot write the Hugging Face model {}: {}", dir, e.what()),
                          fmt::format("nothing was written to {}; free disk space or choose another directory", dir));
  } catch (...) {
    discard_tmp();
    throw;
  }
  return result;
}

HfModelShape hf_shape_from_meta(const ModelMeta& m) {
  const auto refuse = [](const std::string& setting) {
    throw CheckpointError(
        fmt::format("the checkpoint's model has {}, which {} cannot express", setting, hf_supported_architectures()),
        "Hugging Face export supports RMSNorm + SwiGLU + RoPE models without linear biases (q/k/v biases become "
        "Qwen2ForCausalLM)");
  };
  if (m.normalization != "RMSNorm") refuse("normalization " + m.normalization);
  if (!m.swiglu) refuse("swiglu false (a GELU MLP)");
  if (m.position_embedding_type != "rope") refuse("position_embedding_type " + m.position_embedding_type);
  if (m.add_bias_linear) refuse("add_bias_linear true (biases in every linear layer)");
  HfModelShape s;
  s.arch = m.add_qkv_bias ? HfArch::kQwen2 : HfArch::kLlama;
  s.num_layers = m.num_layers;
  s.hidden = m.hidden_size;
  s.ffn = m.ffn_hidden_size;
  s.heads = m.num_attention_heads;
  s.groups = m.num_query_groups;
  s.head_dim = m.kv_channels;
  s.vocab_size = m.vocab_size;
  s.padded_vocab = m.padded_vocab_size;
  s.max_positions = m.max_position_embeddings;
  s.rms_norm_eps = as_float_decimal(m.norm_epsilon);
  s.rope_theta = as_float_decimal(m.rotary_base);
  s.tie_word_embeddings = !m.untie_embeddings_and_output_weights;
  const auto dt = std::find_if(std::begin(kParamsDtypes), std::end(kParamsDtypes),
                               [&](const auto& p) { return m.params_dtype == p.first; });
  if (dt == std::end(kParamsDtypes))
    throw CheckpointError(fmt::format("the checkpoint's model has params_dtype \"{}\"", m.params_dtype),
                          "expected fp32, bf16 or fp16");
  s.dtype = dt->second;
  if (m.num_experts > 0) moe_shape_from_meta(m, s);
  validate_hf_shape(s, "the checkpoint's model");
  return s;
}

ModelMeta meta_from_hf_shape(const HfModelShape& s) {
  ModelMeta m;
  m.num_layers = s.num_layers;
  m.hidden_size = s.hidden;
  m.ffn_hidden_size = s.ffn;
  m.num_attention_heads = s.heads;
  m.num_query_groups = s.groups;
  m.kv_channels = s.head_dim;
  m.vocab_size = s.vocab_size;
  m.padded_vocab_size = s.mcore_vocab();
  m.max_position_embeddings = s.max_positions;
  m.normalization = "RMSNorm";
  m.swiglu = true;
  m.position_embedding_type = "rope";
  m.untie_embeddings_and_output_weights = !s.tie_word_embeddings;
  m.add_bias_linear = false;
  m.add_qkv_bias = s.qkv_bias();
  m.norm_epsilon = s.rms_norm_eps;
  m.rotary_base = s.rope_theta;
  for (const auto& [name, dtype] : kParamsDtypes)
    if (dtype == s.dtype) m.params_dtype = name;
  if (s.moe.num_experts > 0) {
    m.num_experts = s.moe.num_experts;
    m.moe_ffn_hidden_size = s.moe.ffn;
    m.moe_layers = s.moe.layers;
    m.moe_shared_expert_intermediate_size = s.moe.shared_ffn;
    m.moe_shared_expert_gate = s.moe.shared_ffn > 0;
    m.moe_router_topk = s.moe.topk;
    m.moe_router_pre_softmax = !s.moe.norm_topk_prob;
    m.moe_aux_loss_coeff = s.moe.aux_loss_coef;
  }
  return m;
}

}  // namespace mtrain::checkpoint
