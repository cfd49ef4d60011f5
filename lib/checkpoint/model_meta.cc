#include "checkpoint/model_meta.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "common/errors.h"

namespace mtrain::checkpoint {

using json = nlohmann::json;

json model_meta_to_json(const ModelMeta& m) {
  json j{{"num_layers", m.num_layers},
         {"hidden_size", m.hidden_size},
         {"ffn_hidden_size", m.ffn_hidden_size},
         {"num_attention_heads", m.num_attention_heads},
         {"num_query_groups", m.num_query_groups},
         {"kv_channels", m.kv_channels},
         {"vocab_size", m.vocab_size},
         {"padded_vocab_size", m.padded_vocab_size},
         {"max_position_embeddings", m.max_position_embeddings},
         {"normalization", m.normalization},
         {"swiglu", m.swiglu},
         {"position_embedding_type", m.position_embedding_type},
         {"untie_embeddings_and_output_weights", m.untie_embeddings_and_output_weights},
         {"add_bias_linear", m.add_bias_linear},
         {"add_qkv_bias", m.add_qkv_bias},
         {"norm_epsilon", m.norm_epsilon},
         {"rotary_base", m.rotary_base},
         {"params_dtype", m.params_dtype}};
  if (m.num_experts > 0) {  // dense checkpoints keep the pre-MoE description
    j["num_experts"] = m.num_experts;
    j["moe_ffn_hidden_size"] = m.moe_ffn_hidden_size;
    j["moe_layers"] = m.moe_layers;
    j["moe_shared_expert_intermediate_size"] = m.moe_shared_expert_intermediate_size;
    j["moe_shared_expert_gate"] = m.moe_shared_expert_gate;
    if (m.moe_router_topk) {
      j["moe_router_topk"] = *m.moe_router_topk;
      j["moe_router_pre_softmax"] = m.moe_router_pre_softmax;
      j["moe_router_score_function"] = m.moe_router_score_function;
      j["moe_router_topk_scaling_factor"] = m.moe_router_topk_scaling_factor;
      j["moe_router_enable_expert_bias"] = m.moe_router_enable_expert_bias;
      j["moe_aux_loss_coeff"] = m.moe_aux_loss_coeff;
    }
  }
  return j;
}

namespace {

template <class T>
void take(const json& j, const char* key, T& out, const std::string& source) {
  if (!j.is_object() || !j.contains(key))
    throw CheckpointError(fmt::format("{}: the model description has no \"{}\"", source, key),
                          "the checkpoint was not written by this mtrain version, or is damaged");
  const json& v = j.at(key);
  bool ok;
  if constexpr (std::is_same_v<T, bool>) {
    ok = v.is_boolean();
  } else if constexpr (std::is_same_v<T, std::vector<int>>) {
    ok = v.is_array() && std::all_of(v.begin(), v.end(), [](const json& e) { return e == 0 || e == 1; });
  } else if constexpr (std::is_integral_v<T>) {
    ok = v.is_number_integer();
  } else if constexpr (std::is_floating_point_v<T>) {
    ok = v.is_number();
  } else {
    ok = v.is_string();
  }
  if (!ok) throw CheckpointError(fmt::format("{}: \"{}\" of the model description has the wrong type", source, key));
  out = v.get<T>();
}

}  // namespace

ModelMeta model_meta_from_json(const json& j, const std::string& source) {
  ModelMeta m;
  take(j, "num_layers", m.num_layers, source);
  take(j, "hidden_size", m.hidden_size, source);
  take(j, "ffn_hidden_size", m.ffn_hidden_size, source);
  take(j, "num_attention_heads", m.num_attention_heads, source);
  take(j, "num_query_groups", m.num_query_groups, source);
  take(j, "kv_channels", m.kv_channels, source);
  take(j, "vocab_size", m.vocab_size, source);
  take(j, "padded_vocab_size", m.padded_vocab_size, source);
  take(j, "max_position_embeddings", m.max_position_embeddings, source);
  take(j, "normalization", m.normalization, source);
  take(j, "swiglu", m.swiglu, source);
  take(j, "position_embedding_type", m.position_embedding_type, source);
  take(j, "untie_embeddings_and_output_weights", m.untie_embeddings_and_output_weights, source);
  take(j, "add_bias_linear", m.add_bias_linear, source);
  take(j, "add_qkv_bias", m.add_qkv_bias, source);
  take(j, "norm_epsilon", m.norm_epsilon, source);
  take(j, "rotary_base", m.rotary_base, source);
  take(j, "params_dtype", m.params_dtype, source);
  if (j.contains("num_experts")) {  // absent: a dense model
    take(j, "num_experts", m.num_experts, source);
    take(j, "moe_ffn_hidden_size", m.moe_ffn_hidden_size, source);
    take(j, "moe_layers", m.moe_layers, source);
    take(j, "moe_shared_expert_intermediate_size", m.moe_shared_expert_intermediate_size, source);
    take(j, "moe_shared_expert_gate", m.moe_shared_expert_gate, source);
  }
  if (j.contains("moe_router_topk")) {  // absent: written before the router settings were recorded
    int64_t topk = 0;
    take(j, "moe_router_topk", topk, source);
    m.moe_router_topk = topk;
    take(j, "moe_router_pre_softmax", m.moe_router_pre_softmax, source);
    take(j, "moe_router_score_function", m.moe_router_score_function, source);
    take(j, "moe_router_topk_scaling_factor", m.moe_router_topk_scaling_factor, source);
    take(j, "moe_router_enable_expert_bias", m.moe_router_enable_expert_bias, source);
    take(j, "moe_aux_loss_coeff", m.moe_aux_loss_coeff, source);
  }
  return m;
}

std::vector<std::string> model_meta_mismatches(const ModelMeta& s, const ModelMeta& c) {
  std::vector<std::string> out;
  auto check = [&](const char* name, const auto& saved, const auto& current) {
    if (saved != current)
      out.push_back(fmt::format("{} value from checkpoint ({}) is not equal to the input argument value ({})", name,
                                saved, current));
  };
  check("num_layers", s.num_layers, c.num_layers);
  check("hidden_size", s.hidden_size, c.hidden_size);
  check("ffn_hidden_size", s.ffn_hidden_size, c.ffn_hidden_size);
  check("num_attention_heads", s.num_attention_heads, c.num_attention_heads);
  check("num_query_groups", s.num_query_groups, c.num_query_groups);
  check("kv_channels", s.kv_channels, c.kv_channels);
  check("vocab_size", s.vocab_size, c.vocab_size);
  check("max_position_embeddings", s.max_position_embeddings, c.max_position_embeddings);
  check("normalization", s.normalization, c.normalization);
  check("swiglu", s.swiglu, c.swiglu);
  check("position_embedding_type", s.position_embedding_type, c.position_embedding_type);
  check("untie_embeddings_and_output_weights", s.untie_embeddings_and_output_weights,
        c.untie_embeddings_and_output_weights);
  check("add_bias_linear", s.add_bias_linear, c.add_bias_linear);
  check("add_qkv_bias", s.add_qkv_bias, c.add_qkv_bias);
  check("num_experts", s.num_experts, c.num_experts);
  if (s.num_experts > 0 && c.num_experts > 0) {
    check("moe_ffn_hidden_size", s.moe_ffn_hidden_size, c.moe_ffn_hidden_size);
    check("moe_layer_freq", fmt::format("[{}]", fmt::join(s.moe_layers, ",")),
          fmt::format("[{}]", fmt::join(c.moe_layers, ",")));
    check("moe_shared_expert_intermediate_size", s.moe_shared_expert_intermediate_size,
          c.moe_shared_expert_intermediate_size);
    check("moe_shared_expert_gate", s.moe_shared_expert_gate, c.moe_shared_expert_gate);
  }
  return out;
}

}  // namespace mtrain::checkpoint
