// PEFT adapter_config.json and the PEFT <-> mtrain tensor maps (peft_adapter.h).
#include "checkpoint/peft_adapter.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "common/errors.h"

namespace mtrain::checkpoint {

namespace {

using json = nlohmann::json;

// The decoder projections PEFT can adapt on a Llama/Qwen2 model (and on
// Qwen2-MoE's experts and shared expert).
const std::set<std::string> kProjections = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                            "gate_proj", "up_proj", "down_proj"};
// Mixtral's expert linears (w2(silu(w1 x) * w3 x)).
const std::set<std::string> kMixtralExperts = {"w1", "w2", "w3"};

[[noreturn]] void refuse(const std::string& source, const std::string& field, const std::string& what) {
  throw CheckpointError(fmt::format("{}: \"{}\" {}, which mtrain's LoRA cannot represent", source, field, what),
                        "mtrain loads plain LoRA adapters of one rank on the decoder projections "
                        "(peft_type LORA, no DoRA, no per-module ranks or alphas)");
}

template <typename T>
T field(const json& j, const char* key, const T& fallback, const std::string& source) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    throw CheckpointError(fmt::format("{}: \"{}\" has the wrong type ({})", source, key, j.at(key).dump()),
                          "the file is not a PEFT LoraConfig");
  }
}

bool non_empty(const json& j, const char* key) {
  return j.contains(key) && !j.at(key).is_null() && !(j.at(key).is_object() && j.at(key).empty()) &&
         !(j.at(key).is_array() && j.at(key).empty());
}

void check_representable(const json& j, const std::string& source) {
  if (field<std::string>(j, "peft_type", "", source) != "LORA")
    refuse(source, "peft_type", "is " + j.value("peft_type", json("missing")).dump());
  if (field<bool>(j, "use_dora", false, source)) refuse(source, "use_dora", "is true (DoRA)");
  if (non_empty(j, "rank_pattern")) refuse(source, "rank_pattern", "gives modules different ranks");
  if (non_empty(j, "alpha_pattern")) refuse(source, "alpha_pattern", "gives modules different alphas");
  if (field<bool>(j, "fan_in_fan_out", false, source)) refuse(source, "fan_in_fan_out", "is true (Conv1D weights)");
  if (field<bool>(j, "lora_bias", false, source)) refuse(source, "lora_bias", "is true (a bias on lora_B)");
  if (non_empty(j, "layer_replication")) refuse(source, "layer_replication", "is set");
  if (non_empty(j, "trainable_token_indices")) refuse(source, "trainable_token_indices", "is set");
}

}  // namespace

std::string peft_config_json(const PeftLoraConfig& c) {
  const json targets = c.target_regex.empty() ? json(c.target_modules) : json(c.target_regex);
  const json j = {
      {"alpha_pattern", json::object()},
      {"auto_mapping", nullptr},
      {"base_model_name_or_path", c.base_model_name_or_path.empty() ? json(nullptr) : json(c.base_model_name_or_path)},
      {"bias", c.bias},
      {"exclude_modules", nullptr},
      {"fan_in_fan_out", false},
      {"inference_mode", true},
      {"init_lora_weights", true},
      {"layer_replication", nullptr},
      {"layers_pattern", nullptr},
      {"layers_to_transform", nullptr},
      {"loftq_config", json::object()},
      // PEFT's lora_alpha is an int unless given as a float: keep an integral alpha an int.
      {"lora_alpha",
       c.lora_alpha == std::floor(c.lora_alpha) ? json(static_cast<int64_t>(c.lora_alpha)) : json(c.lora_alpha)},
      {"lora_bias", false},
      {"lora_dropout", c.lora_dropout},
      {"megatron_config", nullptr},
      {"megatron_core", "megatron.core"},
      {"modules_to_save", c.modules_to_save.empty() ? json(nullptr) : json(c.modules_to_save)},
      {"peft_type", "LORA"},
      {"r", c.r},
      {"rank_pattern", json::object()},
      {"revision", nullptr},
      {"target_modules", targets},
      {"task_type", "CAUSAL_LM"},
      {"use_dora", false},
      {"trainable_token_indices", nullptr},
      {"eva_config", nullptr},
      {"corda_config", nullptr},
      {"use_rslora", c.use_rslora},
  };
  return j.dump(2) + "\n";
}

PeftLoraConfig parse_peft_config(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw CheckpointError(fmt::format("{}: not valid JSON: {}", source, e.what()),
                          "write it with PEFT's save_pretrained");
  }
  if (!j.is_object()) throw CheckpointError(source + ": expected a JSON object", "the file is not a PEFT LoraConfig");
  check_representable(j, source);
  PeftLoraConfig c;
  c.r = field<int64_t>(j, "r", 8, source);
  if (c.r <= 0) refuse(source, "r", fmt::format("is {}", c.r));
  c.lora_alpha = field<double>(j, "lora_alpha", 8, source);
  c.lora_dropout = field<double>(j, "lora_dropout", 0, source);
  c.use_rslora = field<bool>(j, "use_rslora", false, source);
  c.bias = field<std::string>(j, "bias", "none", source);
  if (c.bias != "none" && c.bias != "all") refuse(source, "bias", "is \"" + c.bias + "\"");
  c.base_model_name_or_path = field<std::string>(j, "base_model_name_or_path", "", source);
  c.modules_to_save = field<std::vector<std::string>>(j, "modules_to_save", {}, source);
  for (const std::string& m : c.modules_to_save)
    if (m != "embed_tokens" && m != "lm_head" && m != "gate") refuse(source, "modules_to_save", "names " + m);
  if (j.contains("target_modules") && j.at("target_modules").is_string()) {
    c.target_regex = j.at("target_modules").get<std::string>();
    if (c.target_regex == "all-linear") c.target_modules.assign(kProjections.begin(), kProjections.end());
    if (c.target_regex == "all-linear") c.target_regex.clear();
  } else {
    c.target_modules = field<std::vector<std::string>>(j, "target_modules", {}, source);
    for (const std::string& t : c.target_modules)
      if (kProjections.count(t) == 0 && kMixtralExperts.count(t) == 0)
        refuse(source, "target_modules", "names " + t + " (not a decoder projection)");
  }
  return c;
}

PeftTensorMap peft_map_for_mcore(const std::string& mcore_name, const HfModelShape& s, int64_t r) {
  PeftTensorMap p;
  const size_t at = mcore_name.find(".lora_");
  if (at == std::string::npos) {  // modules_to_save or a bias: the base tensor under PEFT's prefix
    p.hf = hf_map_for_mcore(mcore_name, s);
    for (std::string& n : p.hf.hf_names) n = kPeftPrefix + n;
    return p;
  }
  const std::string which = mcore_name.substr(at + 1);  // lora_A.weight / lora_B.weight
  if (which != "lora_A.weight" && which != "lora_B.weight")
    throw CheckpointError(fmt::format("tensor {} is not a LoRA adapter tensor", mcore_name),
                          "expected <linear>.lora_A.weight or <linear>.lora_B.weight");
  const HfTensorMap base = hf_map_for_mcore(mcore_name.substr(0, at) + ".weight", s);
  p.hf = base;
  p.hf.mcore_name = mcore_name;
  for (std::string& n : p.hf.hf_names)
    n = kPeftPrefix + n.substr(0, n.size() - 6) + which;  // "...q_proj." + "lora_A.weight"
  if (which == "lora_A.weight") {                         // (r, C) for the fused layer and for every part
    p.shared_a = true;
    p.hf.transform = HfTransform::kCopy;
    p.hf.mcore_shape = {r, base.mcore_shape[1]};
    for (Shape& sh : p.hf.hf_shapes) sh = p.hf.mcore_shape;
  } else {  // (rows, r): the base weight's rows, split the same way
    p.hf.mcore_shape = {base.mcore_shape[0], r};
    for (Shape& sh : p.hf.hf_shapes) sh = {sh[0], r};
  }
  return p;
}

std::vector<std::vector<float>> peft_tensor_to_hf(const PeftTensorMap& m, const std::vector<float>& mcore) {
  if (!m.shared_a) return tensor_to_hf(m.hf, mcore);
  if (static_cast<int64_t>(mcore.size()) != shape_numel(m.hf.mcore_shape))
    throw CheckpointError(fmt::format("tensor {} has {} values, expected {}", m.hf.mcore_name, mcore.size(),
                                      shape_numel(m.hf.mcore_shape)),
                          "the checkpoint's LoRA rank does not match its tensors");
  return std::vector<std::vector<float>>(m.hf.hf_names.size(), mcore);
}

}  // namespace mtrain::checkpoint
