// config.json writing, parsing and validation for Llama / Qwen2 (nlohmann-json).
#include "checkpoint/hf_config.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "common/errors.h"

namespace mtrain::checkpoint {

namespace {

// Sorted keys, as transformers writes config.json (json.dumps(sort_keys=True)).
using Json = nlohmann::json;

constexpr HfArch kArchs[] = {HfArch::kLlama, HfArch::kQwen2};

[[noreturn]] void fail(const std::string& source, const std::string& what, const std::string& hint = "") {
  throw CheckpointError(source + ": " + what, hint);
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
  fail(source, fmt::format("unsupported architecture '{}' in field 'architectures'", name),
       "supported: " + hf_supported_architectures());
}

DType parse_dtype(const Json& j, const std::string& source) {
  // transformers >= 4.56 writes "dtype"; older releases "torch_dtype". "dtype" wins, as in transformers.
  const char* key = field(j, "dtype") ? "dtype" : "torch_dtype";
  const Json* v = field(j, key);
  if (!v) return DType::kF32;
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16})
    if (v->is_string() && v->get<std::string>() == dtype_name(t)) return t;
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
  } else if (bool_value(j, "use_sliding_window", source, false)) {
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

const char* hf_arch_class(HfArch arch) { return arch == HfArch::kQwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"; }

const char* hf_model_type(HfArch arch) { return arch == HfArch::kQwen2 ? "qwen2" : "llama"; }

std::string hf_supported_architectures() {
  std::string out;
  for (HfArch a : kArchs) out += std::string(out.empty() ? "" : ", ") + hf_arch_class(a);
  return out;
}

void validate_hf_shape(const HfModelShape& s, const std::string& source) {
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
  if (s.padded_vocab != 0 && s.padded_vocab < s.vocab_size)
    fail(source,
         fmt::format("padded vocabulary ({}) is smaller than field 'vocab_size' ({})", s.padded_vocab, s.vocab_size));
}

std::string hf_config_json(const HfModelShape& s) {
  validate_hf_shape(s, "config.json");
  Json j;
  j["architectures"] = Json::array({hf_arch_class(s.arch)});
  j["model_type"] = hf_model_type(s.arch);
  j["hidden_act"] = "silu";
  j["hidden_size"] = s.hidden;
  j["intermediate_size"] = s.ffn;
  j["num_attention_heads"] = s.heads;
  j["num_key_value_heads"] = s.groups;
  j["num_hidden_layers"] = s.num_layers;
  j["head_dim"] = s.head_dim;
  j["vocab_size"] = s.vocab_size;
  j["max_position_embeddings"] = s.max_positions;
  j["rms_norm_eps"] = s.rms_norm_eps;
  j["rope_theta"] = s.rope_theta;
  j["rope_scaling"] = nullptr;
  j["tie_word_embeddings"] = s.tie_word_embeddings;
  j["torch_dtype"] = dtype_name(s.dtype);
  j["attention_dropout"] = 0.0;
  j["initializer_range"] = 0.02;
  j["use_cache"] = true;
  if (s.arch == HfArch::kLlama) {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  } else {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["max_window_layers"] = s.num_layers;
  }
  if (s.bos_token_id) j["bos_token_id"] = *s.bos_token_id;
  if (s.eos_token_id) j["eos_token_id"] = *s.eos_token_id;
  return j.dump(2) + "\n";
}

HfModelShape parse_hf_config(const std::string& json_text, const std::string& source) {
  Json j;
  try {
    j = Json::parse(json_text);
  } catch (const Json::exception& e) {
    fail(source, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) fail(source, "not a JSON object");
  HfModelShape s;
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
  const Json* hd = field(j, "head_dim");
  if (hd) {
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
  s.dtype = parse_dtype(j, source);
  s.bos_token_id = token_id(j, "bos_token_id");
  s.eos_token_id = token_id(j, "eos_token_id");
  refuse_unsupported(j, s.arch, source);
  validate_hf_shape(s, source);
  return s;
}

}  // namespace mtrain::checkpoint
