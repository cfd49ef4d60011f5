// PEFT adapter directories on disk: read_peft_adapter / write_peft_adapter (peft_adapter.h).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <regex>
#include <set>

#include "checkpoint/hf_model_dir.h"
#include "checkpoint/peft_adapter.h"
#include "checkpoint/safetensors.h"
#include "common/atomic_file.h"
#include "common/errors.h"

namespace mtrain::checkpoint {

namespace {

constexpr const char* kShapeHint = "the adapter was trained on another base model or with another rank";

// PEFT name of a lora_A part -> (layer, module path in the layer): "...model.layers.3.self_attn.q_proj.lora_A.weight"
// -> (3, "self_attn.q_proj"); an expert's "...layers.3.mlp.experts.7.gate_proj..." -> (3, "mlp.experts.7.gate_proj").
std::pair<int64_t, std::string> layer_module(const std::string& peft_name) {
  static const std::regex re(R"(.*\.layers\.(\d+)\.(.+)\.lora_A\.weight)");
  std::smatch m;
  if (!std::regex_match(peft_name, m, re)) return {-1, ""};
  return {std::stoll(m[1].str()), m[2].str()};
}

std::string last_component(const std::string& path) { return path.substr(path.rfind('.') + 1); }

// Per layer, the module paths of the model's linears whose last name is in `names` (PEFT's suffix match).
std::vector<std::set<std::string>> modules_named(const HfModelShape& s, const std::set<std::string>& names) {
  std::vector<std::set<std::string>> out(static_cast<size_t>(s.num_layers));
  for (const HfTensorMap& t : hf_tensor_maps(s))
    for (const std::string& hf : t.hf_names) {
      const auto [layer, path] = layer_module(kPeftPrefix + hf.substr(0, hf.size() - 7) + ".lora_A.weight");
      if (layer >= 0 && names.count(last_component(path)) > 0) out[static_cast<size_t>(layer)].insert(path);
    }
  return out;
}

// PEFT's target_modules: the projection names when they select exactly the
// adapted modules (every layer's, every expert's), else a whole-name regex of
// exactly the adapted modules (PEFT fullmatches a string against module names).
void set_targets(PeftLoraConfig& c, const std::vector<std::string>& a_names, const HfModelShape& s) {
  std::vector<std::set<std::string>> per_layer(static_cast<size_t>(s.num_layers));
  std::set<std::string> projections;
  std::vector<std::string> modules;
  for (const std::string& n : a_names) {
    const auto [layer, path] = layer_module(n);
    if (layer < 0) continue;
    per_layer[static_cast<size_t>(layer)].insert(path);
    projections.insert(last_component(path));
    modules.push_back(n.substr(std::strlen(kPeftPrefix), n.size() - std::strlen(kPeftPrefix) - 14));
  }
  c.target_modules.clear();
  c.target_regex.clear();
  if (per_layer == modules_named(s, projections)) {
    c.target_modules.assign(projections.begin(), projections.end());
    return;
  }
  std::sort(modules.begin(), modules.end());
  for (const std::string& m : modules)
    c.target_regex += (c.target_regex.empty() ? "" : "|") + std::regex_replace(m, std::regex(R"(\.)"), R"(\.)");
}

// The mtrain tensor and part a PEFT tensor belongs to. Throws naming the tensor.
HfSource source_of(const std::string& peft_name, const HfModelShape& s, const std::string& file) {
  const auto fail = [&](const std::string& why) -> HfSource {
    throw CheckpointError(fmt::format("{}: tensor '{}' {}", file, peft_name, why),
                          "mtrain loads LoRA adapters of the decoder projections and embed_tokens / lm_head");
  };
  if (peft_name.rfind(kPeftPrefix, 0) != 0) return fail(fmt::format("does not start with '{}'", kPeftPrefix));
  std::string rest = peft_name.substr(std::strlen(kPeftPrefix));
  std::string suffix;
  for (const char* ab : {".lora_A.weight", ".lora_B.weight"})
    if (rest.size() > std::strlen(ab) && rest.compare(rest.size() - std::strlen(ab), std::string::npos, ab) == 0) {
      suffix = ab;
      rest = rest.substr(0, rest.size() - suffix.size()) + ".weight";
    }
  if (suffix.empty() && rest.find(".lora_") != std::string::npos) return fail("is not a plain LoRA tensor");
  std::optional<HfSource> src;
  try {
    src = hf_source_for(rest, s);
  } catch (const CheckpointError&) {
    return fail("is not a tensor of this base model");
  }
  if (!src) return fail("is not a tensor of this base model");
  // An MoE router (gate) or shared-expert gate is a plain weight in mtrain, never a LoRA layer
  // (Megatron-SWIFT adapts neither): an adapter on it has no place to go.
  if (!suffix.empty() &&
      (src->mcore_name.ends_with(".mlp.router.weight") || src->mcore_name.ends_with(".shared_experts.gate_weight")))
    return fail("adapts an MoE router or shared-expert gate, which mtrain's LoRA cannot adapt");
  if (!suffix.empty()) src->mcore_name = src->mcore_name.substr(0, src->mcore_name.size() - 7) + suffix;
  return *src;
}

// One mtrain tensor from the PEFT parts present (nullptr: absent).
std::vector<float> assemble(const PeftTensorMap& m, const std::vector<const TensorInfo*>& parts,
                            const SafetensorsFile& f) {
  std::vector<std::vector<float>> values(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    values[i].assign(static_cast<size_t>(shape_numel(m.hf.hf_shapes[i])), 0.f);  // absent: B = 0, no delta
    if (parts[i] == nullptr) continue;
    if (parts[i]->shape != m.hf.hf_shapes[i])
      throw CheckpointError(fmt::format("{}: tensor '{}' has shape {}, expected {}", f.path(), m.hf.hf_names[i],
                                        shape_str(parts[i]->shape), shape_str(m.hf.hf_shapes[i])),
                            kShapeHint);
    f.read_f32(*parts[i], values[i]);
  }
  if (!m.shared_a) {
    std::vector<std::span<const float>> spans(values.begin(), values.end());
    return tensor_from_hf(m.hf, spans);
  }
  const std::vector<float>* a = nullptr;  // the fused layer's one A: every present part must hold it
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i] == nullptr) continue;
    if (a != nullptr && std::memcmp(a->data(), values[i].data(), a->size() * sizeof(float)) != 0)
      throw CheckpointError(
          fmt::format("{}: tensor '{}' differs from '{}': mtrain's fused {} shares one lora_A", f.path(),
                      m.hf.hf_names[i], m.hf.hf_names[0], m.hf.mcore_name.substr(0, m.hf.mcore_name.find(".lora_"))),
          "a fused layer of rank r cannot hold independent q/k/v (gate/up) adapters; train the adapter in mtrain "
          "or export it from mtrain (--to_peft), which shares A");
    if (a == nullptr) a = &values[i];
  }
  return *a;
}

}  // namespace

PeftAdapter read_peft_adapter(FileSystem& fs, const std::string& dir, const HfModelShape& s) {
  const std::string config_path = dir + "/" + kPeftConfigFile, weights = dir + "/" + kPeftWeightsFile;
  for (const std::string& p : {config_path, weights})
    if (!fs.exists(p))
      throw CheckpointError(fmt::format("{}: no such file; {} is not a PEFT adapter directory", p, dir),
                            "expected adapter_config.json and adapter_model.safetensors (PEFT's save_pretrained)");
  PeftAdapter out;
  out.config = parse_peft_config(fs.read_file(config_path, 1 << 20), config_path);
  const SafetensorsFile f = SafetensorsFile::open(fs, weights);
  std::map<std::string, std::vector<const TensorInfo*>> groups;
  for (const TensorInfo& t : f.tensors()) {
    const HfSource src = source_of(t.name, s, weights);
    const PeftTensorMap m = peft_map_for_mcore(src.mcore_name, s, out.config.r);
    auto& parts = groups[src.mcore_name];
    parts.resize(m.hf.hf_names.size(), nullptr);
    parts[static_cast<size_t>(src.part)] = &t;
  }
  for (const auto& [name, parts] : groups) {
    const bool is_b = name.find(".lora_B.") != std::string::npos;
    const std::string pair = name.substr(0, name.find(".lora_")) + (is_b ? ".lora_A.weight" : ".lora_B.weight");
    if (name.find(".lora_") != std::string::npos && groups.count(pair) == 0)
      throw CheckpointError(fmt::format("{}: the adapter of {} has no {}", weights, name, is_b ? "lora_A" : "lora_B"),
                            "every adapted projection needs both lora_A and lora_B");
    out.tensors[name] = assemble(peft_map_for_mcore(name, s, out.config.r), parts, f);
  }
  return out;
}

int64_t write_peft_adapter(FileSystem& fs, const std::string& dir, const HfModelShape& s, PeftLoraConfig config,
                           const std::map<std::string, std::vector<float>>& tensors) {
  require_new_output_dir(fs, dir);
  std::vector<std::string> names, a_names;
  std::vector<Shape> shapes;
  std::vector<std::vector<float>> values;
  config.modules_to_save.clear();
  for (const auto& [mcore, data] : tensors) {
    const PeftTensorMap m = peft_map_for_mcore(mcore, s, config.r);
    if (m.hf.tied_copy) continue;  // the tied embedding is written once, as embed_tokens
    if (mcore == "embedding.word_embeddings.weight") config.modules_to_save.push_back("embed_tokens");
    if (mcore == "output_layer.weight") config.modules_to_save.push_back("lm_head");
    const bool router = mcore.ends_with(".mlp.router.weight");  // PEFT's module "gate", in every MoE layer
    if (router &&
        std::find(config.modules_to_save.begin(), config.modules_to_save.end(), "gate") == config.modules_to_save.end())
      config.modules_to_save.push_back("gate");
    std::vector<std::vector<float>> parts = peft_tensor_to_hf(m, data);
    for (size_t i = 0; i < parts.size(); ++i) {
      names.push_back(m.hf.hf_names[i]);
      if (m.shared_a || mcore.find(".lora_A.") != std::string::npos) a_names.push_back(names.back());
      shapes.push_back(m.hf.hf_shapes[i]);
      values.push_back(std::move(parts[i]));
    }
  }
  set_targets(config, a_names, s);
  std::vector<TensorToWrite> out;
  for (size_t i = 0; i < names.size(); ++i)
    out.push_back(TensorToWrite::from_f32(names[i], shapes[i], values[i].data()));
  const std::string tmp = dir + ".tmp-peft", config_text = peft_config_json(config);
  try {
    fs.remove_all(tmp);  // left by an export that was killed
    fs.create_dirs(tmp, kDefaultDirMode);
    write_file_atomic(fs, tmp + "/" + kPeftConfigFile, config_text, kDefaultFileMode);
    const WrittenFile w = write_safetensors(fs, tmp + "/" + kPeftWeightsFile, out, {{"format", "pt"}});
    fs.rename(tmp, dir);
    fs.sync_dir(parent_dir(dir));
    return w.digest.size + static_cast<int64_t>(config_text.size());
  } catch (const IoError& e) {
    try {
      fs.remove_all(tmp);
    } catch (const IoError&) {  // best effort: the error being reported matters more
    }
    throw CheckpointError(fmt::format("cannot write the PEFT adapter {}: {}", dir, e.what()),
                          fmt::format("nothing was written to {}; free disk space or choose another directory", dir));
  }
}

}  // namespace mtrain::checkpoint
