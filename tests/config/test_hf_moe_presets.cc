// The MoE presets (configs/models/) are the published config.json files as
// `--model` maps them: every model flag of `--model_preset X` equals the one
// `--model <dir with X's config.json>` gives. The texts below are the
// published config.json fields of Qwen/Qwen1.5-MoE-A2.7B,
// mistralai/Mixtral-8x7B-v0.1 and Qwen/Qwen3-30B-A3B on huggingface.co (as
// public code that embeds them quotes them).
#include <gtest/gtest.h>

#include "config_test_util.h"

namespace mtrain::config {
namespace {

using testing::error_of;
using testing::parse;
using testing::TempDir;

constexpr const char* kQwen15MoeA27B = R"({
  "architectures": ["Qwen2MoeForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "decoder_sparse_step": 1, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 2048,
  "initializer_range": 0.02, "intermediate_size": 5632, "max_position_embeddings": 8192,
  "max_window_layers": 21, "model_type": "qwen2_moe", "moe_intermediate_size": 1408,
  "norm_topk_prob": false, "num_attention_heads": 16, "num_experts": 60, "num_experts_per_tok": 4,
  "num_hidden_layers": 24, "num_key_value_heads": 16, "output_router_logits": false, "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": 5632,
  "sliding_window": 32768, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";

constexpr const char* kMixtral8x7B = R"({
  "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32, "num_experts_per_tok": 2,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": false,
  "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02, "sliding_window": null,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 32000})";

constexpr const char* kQwen3_30BA3B = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144, "max_position_embeddings": 40960,
  "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
  "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8,
  "num_hidden_layers": 48, "num_key_value_heads": 4, "output_router_logits": false, "rms_norm_eps": 1e-06,
  "rope_scaling": null, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": null,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 151936})";

void expect_same_model(const Args& a, const Args& b) {
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.ffn_hidden_size, b.ffn_hidden_size);
  EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
  EXPECT_EQ(a.group_query_attention, b.group_query_attention);
  EXPECT_EQ(a.num_query_groups, b.num_query_groups);
  EXPECT_EQ(a.kv_channels, b.kv_channels);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.norm_epsilon, b.norm_epsilon);
  EXPECT_EQ(a.rotary_base, b.rotary_base);
  EXPECT_EQ(a.add_qkv_bias, b.add_qkv_bias);
  EXPECT_EQ(a.qk_layernorm, b.qk_layernorm);
  EXPECT_EQ(a.add_bias_linear, b.add_bias_linear);
  EXPECT_EQ(a.untie_embeddings_and_output_weights, b.untie_embeddings_and_output_weights);
  EXPECT_EQ(a.num_experts, b.num_experts);
  EXPECT_EQ(a.moe_ffn_hidden_size, b.moe_ffn_hidden_size);
  EXPECT_EQ(a.moe_router_topk, b.moe_router_topk);
  EXPECT_EQ(a.moe_layer_freq, b.moe_layer_freq);
  EXPECT_EQ(a.moe_shared_expert_intermediate_size, b.moe_shared_expert_intermediate_size);
  EXPECT_EQ(a.moe_shared_expert_gate, b.moe_shared_expert_gate);
  EXPECT_EQ(a.moe_router_score_function, b.moe_router_score_function);
  EXPECT_EQ(a.moe_router_pre_softmax, b.moe_router_pre_softmax);
  EXPECT_EQ(a.moe_aux_loss_coeff, b.moe_aux_loss_coeff);
}

TEST(HfMoePresets, EqualWhatModelDerivesFromThePublishedConfigJson) {
  for (const auto& [preset, config] :
       {std::pair{"qwen1.5-moe-a2.7b", kQwen15MoeA27B}, std::pair{"mixtral-8x7b", kMixtral8x7B},
        std::pair{"qwen3-30b-a3b", kQwen3_30BA3B}}) {
    SCOPED_TRACE(preset);
    TempDir dir;
    dir.write("config.json", config);
    const std::vector<std::string> common = {"--train_iters", "10", "--max_length", "128"};
    std::vector<std::string> from_model = {"sft", "--model", dir.path()},
                             from_preset = {"sft", "--model_preset", preset};
    from_model.insert(from_model.end(), common.begin(), common.end());
    from_preset.insert(from_preset.end(), common.begin(), common.end());
    expect_same_model(parse(from_model).args, parse(from_preset).args);
  }
}

// A flag that contradicts the experts is refused naming both values (exit 3);
// router_aux_loss_coef is only the default of --moe_aux_loss_coeff.
TEST(HfMoeModelArgs, ContradictionsAreRefusedAndTheAuxCoefficientOverridable) {
  TempDir dir;
  dir.write("config.json", kMixtral8x7B);
  const auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"sft", "--model", dir.path(), "--train_iters", "10", "--max_length", "128"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const std::string experts = error_of([&] { parse(with({"--num_experts", "16"})); }, ExitCode::kConfig);
  EXPECT_NE(experts.find("--num_experts 16 contradicts --model " + dir.path()), std::string::npos) << experts;
  EXPECT_NE(experts.find("has num_local_experts 8 (--num_experts 8)"), std::string::npos) << experts;
  const std::string pre = error_of([&] { parse(with({"--moe_router_pre_softmax"})); }, ExitCode::kConfig);
  EXPECT_NE(pre.find("--moe_router_pre_softmax true contradicts"), std::string::npos) << pre;
  const std::string shared = error_of(
      [&] {
        parse(with({"--moe_shared_expert_intermediate_size", "64"}));
      },
      ExitCode::kConfig);
  EXPECT_NE(shared.find("--moe_shared_expert_intermediate_size 64 contradicts"), std::string::npos) << shared;
  const Invocation inv = parse(with({"--moe_aux_loss_coeff", "0"}));
  EXPECT_EQ(inv.args.moe_aux_loss_coeff, 0.0);
  ASSERT_EQ(inv.warnings.size(), 1u);
  EXPECT_NE(inv.warnings[0].find("has router_aux_loss_coef 0.02 (--moe_aux_loss_coeff 0.02)"), std::string::npos)
      << inv.warnings[0];
}

}  // namespace
}  // namespace mtrain::config
