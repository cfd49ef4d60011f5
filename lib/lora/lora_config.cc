#include "lora/lora_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>

#include "common/errors.h"

namespace mtrain::lora {

namespace {

// PEFT's suffix rule: the module is `name` or ends in ".name".
bool name_matches(const std::string& module, const std::string& name) {
  if (module == name) return true;
  return module.size() > name.size() && module.ends_with(name) && module[module.size() - name.size() - 1] == '.';
}

const std::map<std::string, std::string>& hf_to_megatron() {
  static const std::map<std::string, std::string> m = {
      {"q_proj", "linear_qkv"},    {"k_proj", "linear_qkv"},  {"v_proj", "linear_qkv"},    {"o_proj", "linear_proj"},
      {"gate_proj", "linear_fc1"}, {"up_proj", "linear_fc1"}, {"down_proj", "linear_fc2"},
  };
  return m;
}

void sort_unique(std::vector<std::string>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

}  // namespace

float LoraConfig::scaling() const {
  const double r = static_cast<double>(rank);
  return static_cast<float>(rslora ? alpha / std::sqrt(r) : alpha / r);
}

bool LoraConfig::targets(const std::string& module) const {
  if (!enabled) return false;
  if (!target_regex.empty()) return std::regex_match(module, std::regex(target_regex));
  return std::any_of(target_modules.begin(), target_modules.end(),
                     [&](const std::string& t) { return name_matches(module, t); });
}

bool LoraConfig::saves(const std::string& module) const {
  return enabled && std::any_of(modules_to_save.begin(), modules_to_save.end(),
                                [&](const std::string& t) { return name_matches(module, t); });
}

std::vector<std::string> resolve_target_modules(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  const auto& linears = linear_layer_names();
  for (const std::string& n : names) {
    if (n == "all-linear") {
      out.insert(out.end(), linears.begin(), linears.end());
    } else if (std::find(linears.begin(), linears.end(), n) != linears.end()) {
      out.push_back(n);
    } else if (auto it = hf_to_megatron().find(n); it != hf_to_megatron().end()) {
      out.push_back(it->second);
    } else if (n == "all-embedding" || n == "all-router" || n == "output_layer" || n == "word_embeddings") {
      throw ConfigError(fmt::format("--target_modules {}: LoRA on embeddings, routers or the output layer is not "
                                    "supported yet",
                                    n),
                        "adapt the decoder linears (all-linear), or train the module in full with --modules_to_save");
    } else {
      throw ConfigError(fmt::format("--target_modules {}: no such linear layer in this model", n),
                        "use all-linear, the Megatron names linear_qkv linear_proj linear_fc1 linear_fc2, or the "
                        "Hugging Face names q_proj k_proj v_proj o_proj gate_proj up_proj down_proj");
    }
  }
  if (out.empty()) throw ConfigError("--target_modules is empty", "use --target_modules all-linear (the default)");
  sort_unique(out);
  return out;
}

std::vector<std::string> resolve_modules_to_save(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const std::string& n : names) {
    if (n == "all-embedding") {
      out.insert(out.end(), {"word_embeddings", "position_embeddings"});
    } else if (n == "word_embeddings" || n == "output_layer" || n == "position_embeddings" || n == "router") {
      out.push_back(n);
    } else {
      throw ConfigError(fmt::format("--modules_to_save {}: not supported", n),
                        "mtrain trains word_embeddings, output_layer, position_embeddings (or all-embedding) and an "
                        "MoE model's router in full; adapt linears with --target_modules");
    }
  }
  sort_unique(out);
  return out;
}

void check_target_regex(const std::string& regex) {
  try {
    std::regex re(regex);
  } catch (const std::regex_error& e) {
    throw ConfigError(fmt::format("--target_regex '{}' is not a valid regular expression: {}", regex, e.what()),
                      "the expression must match whole module names, e.g. "
                      "'decoder\\.layers\\.[0-3]\\.self_attention\\.linear_qkv'");
  }
}

}  // namespace mtrain::lora
