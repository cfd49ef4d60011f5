// config.json parsing and validation for Llama / Qwen2 / Qwen2-MoE / Mixtral
// (nlohmann-json), and the model flags it implies.
#include "config/hf_model_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

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

constexpr HfArch kArchs[] = {HfArch::kLlama, HfArch::kQwen2, HfArch::kQwen2Moe, HfArch::kMixtral};
// architectures[0] and model_type of each HfArch, in enum order.
constexpr std::pair<const char*, const char*> kArchNames[] = {{"LlamaForCausalLM", "llama"},
                                                              {"Qwen2ForCausalLM", "qwen2"},
                                                              {"Qwen2MoeForCausalLM", "qwen2_moe"},
                                                              {"MixtralForCausalLM", "mixtral"}};
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
  // Qwen3-MoE differs from Qwen2-MoE's layout by q/k RMSNorm per head, which mtrain's attention lacks.
  if (name == "Qwen3MoeForCausalLM")
    fail(source,
         fmt::format("unsupported architecture '{}' in field 'architectures': its attention normalises q and k per "
                     "head (q_norm, k_norm: q/k RMSNorm), which mtrain's model does not have",
                     name),
         fmt::format("supported: {}; --model_preset qwen3-30b-a3b has its shape for --dry_run and mtrain plan",
                     hf_supported_architectures()));
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
  } else if (arch == HfArch::kMixtral) {
    if (const Json* w = field(j, "sliding_window"))
      fail(source, fmt::format("field 'sliding_window' is {}; mtrain attends to the whole sequence", w->dump()),
           "set it to null for full attention");
    if (number_value(j, "router_jitter_noise", source, 0.0) != 0.0)
      fail(source, "field 'router_jitter_noise' must be 0: mtrain's router adds no jitter to its input");
  } else if (bool_value(j, "use_sliding_window", source, false)) {
    fail(source, "field 'use_sliding_window' = true is not supported (mtrain attends to the whole sequence)");
  }
}

// Layer i is MoE iff it is not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0 (Qwen2-MoE's decoder layer).
std::vector<int> sparse_layer_pattern(const Json& j, int64_t num_layers, const std::string& source) {
  const Json* st = field(j, "decoder_sparse_step");
  const int64_t step = st ? int_value(*st, "decoder_sparse_step", source) : 1;
  if (step < 1) fail(source, fmt::format("field 'decoder_sparse_step' must be positive, got {}", step));
  std::vector<int> layers(static_cast<size_t>(std::max<int64_t>(num_layers, 0)));
  for (int64_t i = 0; i < num_layers; ++i) layers[i] = (i + 1) % step == 0;
  const Json* only = field(j, "mlp_only_layers");
  if (only && !only->is_array())
    fail(source, fmt::format("field 'mlp_only_layers' must be a list of layer numbers, got {}", only->dump()));
  for (const Json& v : only ? *only : Json::array()) {
    const int64_t i = int_value(v, "mlp_only_layers", source);
    if (i < 0 || i >= num_layers)
      fail(source, fmt::format("field 'mlp_only_layers' names layer {}, but the model has {} layers", i, num_layers));
    layers[i] = 0;
  }
  return layers;
}

HfMoeFields parse_moe(const Json& j, HfArch arch, const HfConfigFields& f, const std::string& source) {
  HfMoeFields m;
  if (!hf_arch_is_moe(arch)) return m;
  const bool mixtral = arch == HfArch::kMixtral;
  m.num_experts = required_int(j, mixtral ? "num_local_experts" : "num_experts", source);
  m.topk = required_int(j, "num_experts_per_tok", source);
  m.ffn = mixtral ? f.ffn : required_int(j, "moe_intermediate_size", source);
  m.shared_ffn = mixtral ? 0 : required_int(j, "shared_expert_intermediate_size", source);
  m.norm_topk_prob = mixtral || bool_value(j, "norm_topk_prob", source, false);  // Qwen2MoeConfig's default
  m.layers = mixtral ? std::vector<int>(static_cast<size_t>(std::max<int64_t>(f.num_layers, 0)), 1)
                     : sparse_layer_pattern(j, f.num_layers, source);
  m.aux_loss_coef = number_value(j, "router_aux_loss_coef", source, 0.001);  // both configs' default
  if (!mixtral) m.qkv_bias = bool_value(j, "qkv_bias", source, true);
  return m;
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

void validate_moe(const HfConfigFields& s, const std::string& source) {
  const HfMoeFields& m = s.moe;
  const bool mixtral = s.arch == HfArch::kMixtral;
  check_positive(source, mixtral ? "num_local_experts" : "num_experts", m.num_experts);
  check_positive(source, "num_experts_per_tok", m.topk);
  check_positive(source, mixtral ? "intermediate_size" : "moe_intermediate_size", m.ffn);
  if (!mixtral) check_positive(source, "shared_expert_intermediate_size", m.shared_ffn);
  if (m.topk > m.num_experts)
    fail(source,
         fmt::format("field 'num_experts_per_tok' ({}) exceeds the number of experts ({})", m.topk, m.num_experts));
  if (static_cast<int64_t>(m.layers.size()) != s.num_layers)
    fail(source, fmt::format("the MoE layer pattern has {} entries for {} layers", m.layers.size(), s.num_layers));
  if (std::find(m.layers.begin(), m.layers.end(), 1) == m.layers.end())
    fail(source, "no layer is a mixture of experts (decoder_sparse_step and mlp_only_layers leave none)");
  if (mixtral && std::find(m.layers.begin(), m.layers.end(), 0) != m.layers.end())
    fail(source, "every MixtralForCausalLM layer is a mixture of experts");
  if (!(m.aux_loss_coef >= 0) || !std::isfinite(m.aux_loss_coef))
    fail(source, fmt::format("field 'router_aux_loss_coef' must be a non-negative number, got {}", m.aux_loss_coef));
}

// The MoE flags as Megatron-SWIFT's config conversion maps them (mcore-bridge
// config/parser.py): num_experts / num_local_experts, moe_intermediate_size,
// shared_expert_intermediate_size (+ Qwen2-MoE's gate), num_experts_per_tok,
// moe_router_pre_softmax = not norm_topk_prob. Beyond it: the MoE layer
// pattern (decoder_sparse_step, mlp_only_layers) and router_aux_loss_coef as
// the default --moe_aux_loss_coeff (as the presets take it).
std::vector<HfImpliedFlag> hf_moe_implied_flags(const HfConfigFields& f) {
  const auto num = [](auto v) { return fmt::format("{}", v); };
  const auto boolean = [](bool v) -> std::string { return v ? "true" : "false"; };
  const HfMoeFields& m = f.moe;
  const bool mixtral = f.arch == HfArch::kMixtral;
  const bool all_moe = std::find(m.layers.begin(), m.layers.end(), 0) == m.layers.end();
  std::string pattern = "1";  // Megatron's int form: every layer
  if (!all_moe) pattern = fmt::format("[{}]", fmt::join(m.layers, ","));
  const HfSparseLayers sparse = hf_sparse_layers(m.layers);
  const std::string sparse_text = mixtral ? "every layer"
                                          : fmt::format("{} with mlp_only_layers [{}]", sparse.decoder_sparse_step,
                                                        fmt::join(sparse.mlp_only_layers, ", "));
  const std::string topk_field = mixtral ? "architectures" : "norm_topk_prob";
  const std::string topk_value = mixtral ? hf_arch_class(f.arch) : boolean(m.norm_topk_prob);
  return {
      {"num_experts", num(m.num_experts), mixtral ? "num_local_experts" : "num_experts", num(m.num_experts)},
      {"moe_ffn_hidden_size", num(m.ffn), mixtral ? "intermediate_size" : "moe_intermediate_size", num(m.ffn)},
      {"moe_router_topk", num(m.topk), "num_experts_per_tok", num(m.topk)},
      {"moe_layer_freq", pattern, mixtral ? "architectures" : "decoder_sparse_step", sparse_text},
      {"moe_shared_expert_intermediate_size", mixtral ? "None" : num(m.shared_ffn),
       mixtral ? "architectures" : "shared_expert_intermediate_size",
       mixtral ? hf_arch_class(f.arch) : num(m.shared_ffn)},
      {"moe_shared_expert_gate", boolean(!mixtral), "architectures", hf_arch_class(f.arch)},
      {"moe_router_score_function", "softmax", "architectures", hf_arch_class(f.arch)},
      {"moe_router_pre_softmax", boolean(!m.norm_topk_prob), topk_field, topk_value},
      {"moe_aux_loss_coeff", num(m.aux_loss_coef), "router_aux_loss_coef", num(m.aux_loss_coef), false},
  };
}

}  // namespace

const char* hf_arch_class(HfArch arch) { return kArchNames[static_cast<int>(arch)].first; }

const char* hf_model_type(HfArch arch) { return kArchNames[static_cast<int>(arch)].second; }

bool hf_arch_is_moe(HfArch arch) { return arch == HfArch::kQwen2Moe || arch == HfArch::kMixtral; }

HfSparseLayers hf_sparse_layers(const std::vector<int>& moe_layers) {
  HfSparseLayers best;
  bool found = false;
  const int64_t n = static_cast<int64_t>(moe_layers.size());
  for (int64_t step = 1; step <= std::max<int64_t>(n, 1); ++step) {
    HfSparseLayers c{step, {}};
    bool valid = true;
    for (int64_t i = 0; i < n && valid; ++i) {
      const bool on_step = (i + 1) % step == 0;
      valid = on_step || !moe_layers[i];
      if (on_step && !moe_layers[i]) c.mlp_only_layers.push_back(i);
    }
    if (valid && (!found || c.mlp_only_layers.size() < best.mlp_only_layers.size())) best = c, found = true;
  }
  return best;
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
  if ((s.arch == HfArch::kQwen2 || s.arch == HfArch::kQwen2Moe) && s.heads * s.head_dim != s.hidden)
    fail(source, fmt::format("field 'head_dim' ({}) must equal hidden_size / num_attention_heads ({} / {}) for {}",
                             s.head_dim, s.hidden, s.heads, hf_arch_class(s.arch)));
  if (std::find(std::begin(kDtypes), std::end(kDtypes), s.torch_dtype) == std::end(kDtypes))
    fail(source, fmt::format("unsupported torch_dtype \"{}\"", s.torch_dtype), "supported: float32, bfloat16, float16");
  if (hf_arch_is_moe(s.arch)) validate_moe(s, source);
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
  s.moe = parse_moe(j, s.arch, s, source);
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
  std::vector<HfImpliedFlag> flags{
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
      {"add_qkv_bias", boolean(f.qkv_bias()), f.arch == HfArch::kQwen2Moe ? "qkv_bias" : "architectures",
       f.arch == HfArch::kQwen2Moe ? boolean(f.qkv_bias()) : arch},
      {"max_position_embeddings", num(f.max_positions), "max_position_embeddings", num(f.max_positions), false},
      {"norm_epsilon", num(f.rms_norm_eps), "rms_norm_eps", num(f.rms_norm_eps), false},
      {"rotary_base", num(f.rope_theta), "rope_theta", num(f.rope_theta), false},
  };
  if (hf_arch_is_moe(f.arch)) {
    const std::vector<HfImpliedFlag> moe = hf_moe_implied_flags(f);
    flags.insert(flags.end(), moe.begin(), moe.end());
  }
  return flags;
}

}  // namespace mtrain::config
