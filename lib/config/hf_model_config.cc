// config.json parsing and validation for Llama / Qwen2 (nlohmann-json), and
// the model flags it implies.
#include "config/hf_model_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/errors.h"

namespace mtrain::config {

namespace {

using Json = nlohmann::json;

constexpr HfArch kArchs[] = {HfArch::kLlama, HfArch::kQwen2, HfArch::kQwen3};
constexpr const char* kDtypes[] = {"float32", "bfloat16", "float16"};
constexpr std::uintmax_t kMaxConfigBytes = 16 << 20;  // real ones are a few KiB

[[noreturn]] void fail(const std::string& source, const std::string& what, const std::string& hint = "") {
  throw ConfigError(source + ": " + what, hint);
}

// A field that is absent or null counts as missing (transformers treats null as "use the default").
const Json* field(const Json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

int64_t int_value(const Json& v, const char* key, const std::string& source) {
  if (!v.is_number_integer()) fail(source, fmt::format("field '{}' must be an integer, got {}", key, v.dump()));
  return v.get<int64_t>();
}

int64_t required_int(const Json& j, const char* key, const std::string& source) {
  const Json* v = field(j, key);
  if (!v)
    fail(source, fmt::format("missing field '{}'", key), "a Llama/Qwen2 config.json written by transformers has it");
  return int_value(*v, key, source);
}

double number_value(const Json& j, const char* key, const std::string& source, std::optional<double> fallback) {
  const Json* v = field(j, key);
  if (!v) {
    if (!fallback) fail(source, fmt::format("missing field '{}'", key));
    return *fallback;
  }
  if (!v->is_number()) fail(source, fmt::format("field '{}' must be a number, got {}", key, v->dump()));
  return v->get<double>();
}

bool bool_value(const Json& j, const char* key, const std::string& source, bool fallback) {
  const Json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_boolean()) fail(source, fmt::format("field '{}' must be true or false, got {}", key, v->dump()));
  return v->get<bool>();
}

HfArch parse_arch(const Json& j, const std::string& source) {
  const Json* v = field(j, "architectures");
  if (!v) fail(source, "missing field 'architectures'", "supported: " + hf_supported_architectures());
  if (!v->is_array() || v->empty() || !(*v)[0].is_string())
    fail(source, fmt::format("field 'architectures' must be a non-empty list of class names, got {}", v->dump()));
  const std::string name = (*v)[0].get<std::string>();
  for (HfArch a : kArchs) {
    if (name != hf_arch_class(a)) continue;
    const Json* type = field(j, "model_type");
    if (type && (!type->is_string() || type->get<std::string>() != hf_model_type(a)))
      fail(source, fmt::format("field 'model_type' is {} but architectures says {} (model_type \"{}\")", type->dump(),
                               name, hf_model_type(a)));
    return a;
  }
  // The MoE classes mtrain has presets for: say what is missing and what plans them.
  static const std::pair<const char*, const char*> kMoe[] = {{"Qwen2MoeForCausalLM", "qwen1.5-moe-a2.7b"},
                                                             {"Qwen3MoeForCausalLM", "qwen3-30b-a3b"},
                                                             {"MixtralForCausalLM", "mixtral-8x7b"}};
  for (const auto& [moe, preset] : kMoe)
    if (name == moe)
      fail(source,
           fmt::format("unsupported architecture '{}' in field 'architectures': loading Hugging Face "
                       "mixture-of-experts weights is not implemented yet",
                       name),
           fmt::format("supported: {}; --model_preset {} has its shape for --dry_run and mtrain plan",
                       hf_supported_architectures(), preset));
  fail(source, fmt::format("unsupported architecture '{}' in field 'architectures'", name),
       "supported: " + hf_supported_architectures());
}

std::string parse_dtype(const Json& j, const std::string& source) {
  // transformers >= 4.56 writes "dtype"; older releases "torch_dtype". "dtype" wins, as in transformers.
  const char* key = field(j, "dtype") ? "dtype" : "torch_dtype";
  const Json* v = field(j, key);
  if (!v) return "float32";
  for (const char* t : kDtypes)
    if (v->is_string() && v->get<std::string>() == t) return t;
  fail(source, fmt::format("unsupported {} {}", key, v->dump()), "supported: float32, bfloat16, float16");
}

// Features of the HF classes that mtrain's model does not have: refuse rather than load different math.
void refuse_unsupported(const Json& j, HfArch arch, const std::string& source) {
  if (const Json* act = field(j, "hidden_act"); act && *act != "silu")
    fail(source, fmt::format("field 'hidden_act' is {}; mtrain's SwiGLU needs \"silu\"", act->dump()));
  if (const Json* rs = field(j, "rope_scaling"))
    fail(source,
         fmt::format("field 'rope_scaling' is not supported (got {}); mtrain's RoPE has no scaling", rs->dump()));
  if (arch == HfArch::kLlama) {
    for (const char* key : {"attention_bias", "mlp_bias"})
      if (bool_value(j, key, source, false))
        fail(source, fmt::format("field '{}' = true is not supported for LlamaForCausalLM", key),
             "Qwen2ForCausalLM is the supported architecture with q/k/v biases");
  } else if (arch == HfArch::kQwen3 && bool_value(j, "attention_bias", source, false)) {
    fail(source, "field 'attention_bias' = true is not supported for Qwen3ForCausalLM",
         "Qwen3's attention_bias also puts a bias on o_proj, which mtrain's --add_qkv_bias does not have");
  }
  if (arch != HfArch::kLlama && bool_value(j, "use_sliding_window", source, false)) {
    fail(source, "field 'use_sliding_window' = true is not supported (mtrain attends to the whole sequence)");
  }
}

std::optional<int64_t> token_id(const Json& j, const char* key) {
  const Json* v = field(j, key);
  // Some configs list several end tokens; the tokenizer has them, so only a single id is kept.
  if (!v || !v->is_number_integer()) return std::nullopt;
  return v->get<int64_t>();
}

void check_positive(const std::string& source, const char* key, int64_t v) {
  if (v <= 0) fail(source, fmt::format("field '{}' must be positive, got {}", key, v));
}

void check_positive(const std::string& source, const char* key, double v) {
  if (!(v > 0) || !std::isfinite(v)) fail(source, fmt::format("field '{}' must be a positive number, got {}", key, v));
}

}  // namespace

const char* hf_arch_class(HfArch arch) {
  return arch == HfArch::kQwen3 ? "Qwen3ForCausalLM" : arch == HfArch::kQwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
}

const char* hf_model_type(HfArch arch) {
  return arch == HfArch::kQwen3 ? "qwen3" : arch == HfArch::kQwen2 ? "qwen2" : "llama";
}

std::string hf_supported_architectures() {
  std::string out;
  for (HfArch a : kArchs) out += std::string(out.empty() ? "" : ", ") + hf_arch_class(a);
  return out;
}

void validate_hf_config(const HfConfigFields& s, const std::string& source) {
  check_positive(source, "num_hidden_layers", s.num_layers);
  check_positive(source, "hidden_size", s.hidden);
  check_positive(source, "intermediate_size", s.ffn);
  check_positive(source, "num_attention_heads", s.heads);
  check_positive(source, "num_key_value_heads", s.groups);
  check_positive(source, "head_dim", s.head_dim);
  check_positive(source, "vocab_size", s.vocab_size);
  check_positive(source, "max_position_embeddings", s.max_positions);
  check_positive(source, "rms_norm_eps", s.rms_norm_eps);
  check_positive(source, "rope_theta", s.rope_theta);
  if (s.heads % s.groups != 0)
    fail(source,
         fmt::format("field 'num_key_value_heads' ({}) must divide num_attention_heads ({})", s.groups, s.heads));
  if (s.head_dim % 2 != 0) fail(source, fmt::format("field 'head_dim' must be even for RoPE, got {}", s.head_dim));
  if (s.arch == HfArch::kQwen2 && s.heads * s.head_dim != s.hidden)
    fail(source, fmt::format("field 'head_dim' ({}) must equal hidden_size / num_attention_heads ({} / {}) for {}",
                             s.head_dim, s.hidden, s.heads, hf_arch_class(s.arch)));
  if (std::find(std::begin(kDtypes), std::end(kDtypes), s.torch_dtype) == std::end(kDtypes))
    fail(source, fmt::format("unsupported torch_dtype \"{}\"", s.torch_dtype), "supported: float32, bfloat16, float16");
}

HfConfigFields parse_hf_config_fields(const std::string& json_text, const std::string& source) {
  Json j;
  try {
    j = Json::parse(json_text);
  } catch (const Json::exception& e) {
    fail(source, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) fail(source, "not a JSON object");
  HfConfigFields s;
  s.arch = parse_arch(j, source);
  s.hidden = required_int(j, "hidden_size", source);
  s.ffn = required_int(j, "intermediate_size", source);
  s.heads = required_int(j, "num_attention_heads", source);
  s.num_layers = required_int(j, "num_hidden_layers", source);
  s.vocab_size = required_int(j, "vocab_size", source);
  s.max_positions = required_int(j, "max_position_embeddings", source);
  s.rms_norm_eps = number_value(j, "rms_norm_eps", source, std::nullopt);
  const Json* kv = field(j, "num_key_value_heads");
  s.groups = kv ? int_value(*kv, "num_key_value_heads", source) : s.heads;
  if (const Json* hd = field(j, "head_dim")) {
    s.head_dim = int_value(*hd, "head_dim", source);
  } else {
    check_positive(source, "num_attention_heads", s.heads);
    if (s.hidden % s.heads != 0)
      fail(source, fmt::format("field 'hidden_size' ({}) is not divisible by num_attention_heads ({}) and there is "
                               "no head_dim",
                               s.hidden, s.heads));
    s.head_dim = s.hidden / s.heads;
  }
  s.rope_theta = number_value(j, "rope_theta", source, 10000.0);
  s.tie_word_embeddings = bool_value(j, "tie_word_embeddings", source, false);
  s.torch_dtype = parse_dtype(j, source);
  s.bos_token_id = token_id(j, "bos_token_id");
  s.eos_token_id = token_id(j, "eos_token_id");
  refuse_unsupported(j, s.arch, source);
  validate_hf_config(s, source);
  return s;
}

HfConfigFields read_hf_model_dir_config(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(dir) / "config.json").string();
  const char* hint =
      "--model takes a local Hugging Face model directory (config.json, *.safetensors, tokenizer.json); "
      "download the model first";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw ConfigError(fmt::format("--model {}: not a directory", dir), hint);
  if (!fs::is_regular_file(path, ec)) throw ConfigError(fmt::format("--model {}: no config.json in it", dir), hint);
  const std::uintmax_t size = fs::file_size(path, ec);
  if (ec || size > kMaxConfigBytes)
    throw ConfigError(fmt::format("{}: unreadable or larger than {} bytes", path, kMaxConfigBytes));
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) throw ConfigError(fmt::format("{}: cannot be read", path));
  return parse_hf_config_fields(text.str(), path);
}

std::vector<HfImpliedFlag> hf_implied_flags(const HfConfigFields& f) {
  const auto num = [](auto v) { return fmt::format("{}", v); };
  const auto boolean = [](bool v) -> std::string { return v ? "true" : "false"; };
  const std::string arch = hf_arch_class(f.arch);
  const bool gqa = f.groups < f.heads;
  return {
      {"num_layers", num(f.num_layers), "num_hidden_layers", num(f.num_layers)},
      {"hidden_size", num(f.hidden), "hidden_size", num(f.hidden)},
      {"ffn_hidden_size", num(f.ffn), "intermediate_size", num(f.ffn)},
      {"num_attention_heads", num(f.heads), "num_attention_heads", num(f.heads)},
      {"group_query_attention", boolean(gqa), "num_key_value_heads", num(f.groups)},
      {"num_query_groups", num(f.groups), "num_key_value_heads", num(f.groups)},
      {"kv_channels", num(f.head_dim), "head_dim", num(f.head_dim)},
      {"vocab_size", num(f.vocab_size), "vocab_size", num(f.vocab_size)},
      {"normalization", "RMSNorm", "architectures", arch},
      {"swiglu", "true", "hidden_act", "silu"},
      {"position_embedding_type", "rope", "architectures", arch},
      {"untie_embeddings_and_output_weights", boolean(!f.tie_word_embeddings), "tie_word_embeddings",
       boolean(f.tie_word_embeddings)},
      {"add_bias_linear", "false", "architectures", arch},
      {"add_qkv_bias", boolean(f.arch == HfArch::kQwen2), "architectures", arch},
      {"qk_layernorm", boolean(f.arch == HfArch::kQwen3), "architectures", arch},
      {"max_position_embeddings", num(f.max_positions), "max_position_embeddings", num(f.max_positions), false},
      {"norm_epsilon", num(f.rms_norm_eps), "rms_norm_eps", num(f.rms_norm_eps), false},
      {"rotary_base", num(f.rope_theta), "rope_theta", num(f.rope_theta), false},
  };
}

}  // namespace mtrain::config
