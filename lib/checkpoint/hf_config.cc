// config.json writing for Llama / Qwen2 / Qwen2-MoE / Mixtral (nlohmann-json); parsing and the
// field rules are lib/config's (config/hf_model_config.h), with their
// ConfigError turned into CheckpointError here.
#include "checkpoint/hf_config.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "common/errors.h"

namespace mtrain::checkpoint {

namespace {

// Sorted keys, as transformers writes config.json (json.dumps(sort_keys=True)).
using Json = nlohmann::json;

// The fields HfModelShape and config::HfConfigFields share, copied either way.
template <class To, class From>
void copy_fields(To& to, const From& from) {
  to.arch = from.arch;
  to.num_layers = from.num_layers;
  to.hidden = from.hidden;
  to.ffn = from.ffn;
  to.heads = from.heads;
  to.groups = from.groups;
  to.head_dim = from.head_dim;
  to.vocab_size = from.vocab_size;
  to.max_positions = from.max_positions;
  to.rms_norm_eps = from.rms_norm_eps;
  to.rope_theta = from.rope_theta;
  to.tie_word_embeddings = from.tie_word_embeddings;
  to.bos_token_id = from.bos_token_id;
  to.eos_token_id = from.eos_token_id;
  to.moe = from.moe;
}

// Runs f; a ConfigError from lib/config's rules becomes a CheckpointError (exit 5) with the same text.
template <class F>
auto as_checkpoint_error(F&& f) {
  try {
    return f();
  } catch (const ConfigError& e) {
    throw CheckpointError(e.what(), e.hint());
  }
}

// Qwen2MoeConfig's / MixtralConfig's expert fields. output_router_logits is
// written false: it asks the forward for the router logits (and HF's own aux
// loss), not part of the model.
void add_moe_fields(Json& j, const HfModelShape& s) {
  const HfMoeFields& m = s.moe;
  if (s.arch == HfArch::kMixtral) {
    j["intermediate_size"] = m.ffn;
    j["num_local_experts"] = m.num_experts;
    j["router_jitter_noise"] = 0.0;
  } else {
    const config::HfSparseLayers sparse = config::hf_sparse_layers(m.layers);
    j["num_experts"] = m.num_experts;
    j["moe_intermediate_size"] = m.ffn;
    j["shared_expert_intermediate_size"] = m.shared_ffn;
    j["norm_topk_prob"] = m.norm_topk_prob;
    j["decoder_sparse_step"] = sparse.decoder_sparse_step;
    j["mlp_only_layers"] = sparse.mlp_only_layers;
    j["qkv_bias"] = m.qkv_bias;
  }
  j["num_experts_per_tok"] = m.topk;
  j["output_router_logits"] = false;
  j["router_aux_loss_coef"] = m.aux_loss_coef;
}

}  // namespace

void validate_hf_shape(const HfModelShape& s, const std::string& source) {
  config::HfConfigFields f;
  copy_fields(f, s);
  f.torch_dtype = dtype_name(s.dtype);
  as_checkpoint_error([&] { config::validate_hf_config(f, source); });
  if (s.padded_vocab != 0 && s.padded_vocab < s.vocab_size)
    throw CheckpointError(fmt::format("{}: padded vocabulary ({}) is smaller than field 'vocab_size' ({})", source,
                                      s.padded_vocab, s.vocab_size));
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
  } else if (s.arch == HfArch::kMixtral) {
    j["sliding_window"] = nullptr;
  } else {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["max_window_layers"] = s.num_layers;
  }
  if (hf_arch_is_moe(s.arch)) add_moe_fields(j, s);
  if (s.bos_token_id) j["bos_token_id"] = *s.bos_token_id;
  if (s.eos_token_id) j["eos_token_id"] = *s.eos_token_id;
  return j.dump(2) + "\n";
}

HfModelShape parse_hf_config(const std::string& json_text, const std::string& source) {
  const config::HfConfigFields f =
      as_checkpoint_error([&] { return config::parse_hf_config_fields(json_text, source); });
  HfModelShape s;
  copy_fields(s, f);
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16})
    if (f.torch_dtype == dtype_name(t)) s.dtype = t;
  return s;
}

}  // namespace mtrain::checkpoint
