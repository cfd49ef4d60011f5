// The LoRA flags: Megatron-SWIFT's names, v3/v4 spellings and defaults, the
// swift-to-Megatron target mapping, and refusals by name of what is not
// implemented (exit 3, a hint).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/config_test_util.h"
#include "config/validate.h"
#include "lora/lora_config.h"

namespace mtrain::lora {
namespace {

using config::Args;
using config::testing::error_of;
using config::testing::parse_sft;
using config::testing::sft_with;
using Names = std::vector<std::string>;

Args validated(std::vector<std::string> extra) {
  Args a = parse_sft(std::move(extra));
  config::validate(a, 1);
  return a;
}

TEST(LoraFlags, SwiftNamesAndDefaults) {
  for (const char* spelling : {"--train_type", "--tuner_type"}) {
    const Args a = validated({spelling, "lora"});
    EXPECT_EQ(a.train_type, "lora");
    EXPECT_EQ(a.lora_rank, 8);  // swift's MegatronTunerMixin defaults
    EXPECT_EQ(a.lora_alpha, 32);
    EXPECT_DOUBLE_EQ(a.lora_dropout, 0.05);
    EXPECT_EQ(a.lora_bias, "none");
    EXPECT_FALSE(a.use_rslora);
    EXPECT_EQ(a.target_modules, Names{"all-linear"});
    EXPECT_DOUBLE_EQ(*a.lr, 1e-4);  // swift: 1e-4 under LoRA
  }
  EXPECT_DOUBLE_EQ(*validated({}).lr, 1e-5);  // 1e-5 full
  EXPECT_DOUBLE_EQ(*validated({"--train_type", "lora", "--lr", "3e-4"}).lr, 3e-4);
  const Args a = validated({"--train_type", "lora", "--lora_rank", "16", "--lora_alpha", "64", "--lora_dropout", "0",
                            "--lora_bias", "all", "--use_rslora", "true", "--target_modules", "q_proj", "o_proj",
                            "--modules_to_save", "word_embeddings"});
  EXPECT_EQ(a.lora_rank, 16);
  EXPECT_EQ(a.lora_alpha, 64);
  EXPECT_EQ(a.lora_bias, "all");
  EXPECT_TRUE(a.use_rslora);
  EXPECT_EQ(a.target_modules, (Names{"q_proj", "o_proj"}));
  EXPECT_EQ(a.modules_to_save, Names{"word_embeddings"});
}

TEST(LoraFlags, BadValuesAndNotYetImplementedSettingsAreRefusedByName) {
  auto refused = [](std::vector<std::string> extra) {
    return error_of([&] { validated(std::move(extra)); }, ExitCode::kConfig);
  };
  EXPECT_EQ(refused({"--train_type", "lora", "--lora_rank", "0"}), "--lora_rank must be >= 1, got 0");
  EXPECT_EQ(refused({"--train_type", "lora", "--lora_dropout", "1"}), "--lora_dropout must be in [0, 1), got 1");
  EXPECT_EQ(refused({"--lora_rank", "16"}), "--lora_rank applies only to LoRA training, but --train_type is full");
  EXPECT_EQ(refused({"--mcore_adapter", "ckpt"}),
            "--adapter_load applies only to LoRA training, but --train_type is full");
  EXPECT_EQ(refused({"--target_modules", "q_proj"}),
            "--target_modules applies only to LoRA training, but --train_type is full");
  const std::vector<std::pair<Names, std::string>> not_yet = {
      {{"--merge_lora", "true"},
       "--merge_lora true: merging LoRA into the base weights (--merge_lora) is not supported yet"},
      {{"--lora_dtype", "bfloat16"},
       "--lora_dtype bfloat16: --lora_dtype is not supported: adapters train in fp32 master precision"},
      {{"--use_dora", "true"}, "--use_dora true: DoRA is not supported"},
      {{"--lorap_lr_ratio", "16"}, "--lorap_lr_ratio 16: LoRA+ (--lorap_lr_ratio) is not supported"},
      {{"--init_weights", "pissa"},
       "--init_weights pissa: only PEFT's default LoRA init (A Kaiming-uniform, B zero) is supported"},
  };
  for (const auto& [flags, message] : not_yet) {
    Names extra = {"--train_type", "lora"};
    extra.insert(extra.end(), flags.begin(), flags.end());
    EXPECT_EQ(refused(extra), message);
  }
  EXPECT_EQ(config::testing::usage_error(sft_with({"--lora_bias", "lora_only"})),
            "invalid value for --lora_bias: invalid choice: 'lora_only' (choose from 'none', 'all')");
}

// Megatron-SWIFT on an mcore GPT: all-linear is every decoder linear but the
// output layer (find_all_linears); HF projection names select the fused
// Megatron layer that holds them (mcore-bridge's mapping).
TEST(LoraTargets, SwiftNamesMapOntoTheFusedMegatronLayers) {
  const Names all = {"linear_fc1", "linear_fc2", "linear_proj", "linear_qkv"};
  EXPECT_EQ(resolve_target_modules({"all-linear"}), all);
  const std::vector<std::pair<std::string, std::string>> table = {
      {"q_proj", "linear_qkv"},    {"k_proj", "linear_qkv"},     {"v_proj", "linear_qkv"},
      {"o_proj", "linear_proj"},   {"gate_proj", "linear_fc1"},  {"up_proj", "linear_fc1"},
      {"down_proj", "linear_fc2"}, {"linear_qkv", "linear_qkv"}, {"linear_fc2", "linear_fc2"},
  };
  for (const auto& [name, megatron] : table) EXPECT_EQ(resolve_target_modules({name}), Names{megatron}) << name;
  EXPECT_EQ(resolve_target_modules({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}), all);
  EXPECT_EQ(error_of([] { resolve_target_modules({"qkv_proj"}); }, ExitCode::kConfig),
            "--target_modules qkv_proj: no such linear layer in this model");
  EXPECT_EQ(error_of([] { resolve_target_modules({"all-embedding"}); }, ExitCode::kConfig),
            "--target_modules all-embedding: LoRA on embeddings, routers or the output layer is not supported yet");
  EXPECT_EQ(resolve_modules_to_save({"all-embedding", "output_layer"}),
            (Names{"output_layer", "position_embeddings", "word_embeddings"}));
  EXPECT_EQ(error_of([] { resolve_modules_to_save({"final_layernorm"}); }, ExitCode::kConfig),
            "--modules_to_save final_layernorm: not supported");
}

// PEFT's matching: a target name matches a module that is it or ends in ".name";
// --target_regex must match the whole module name.
TEST(LoraTargets, ModuleMatchingFollowsPeft) {
  LoraConfig c;
  c.enabled = true;
  c.target_modules = resolve_target_modules({"q_proj"});
  EXPECT_TRUE(c.targets("decoder.layers.0.self_attention.linear_qkv"));
  EXPECT_FALSE(c.targets("decoder.layers.0.self_attention.linear_proj"));
  EXPECT_FALSE(c.targets("decoder.layers.0.self_attention.xlinear_qkv"));
  c.target_regex = R"(decoder\.layers\.1\..*linear_fc.)";
  EXPECT_TRUE(c.targets("decoder.layers.1.mlp.linear_fc1"));
  EXPECT_FALSE(c.targets("decoder.layers.0.mlp.linear_fc1"));
  EXPECT_FALSE(c.targets("decoder.layers.1.self_attention.linear_qkv"));
  EXPECT_EQ(error_of([] { check_target_regex("linear_(qkv"); }, ExitCode::kConfig).find("--target_regex 'linear_(qkv'"),
            0u);
  c.modules_to_save = {"word_embeddings"};
  EXPECT_TRUE(c.saves("embedding.word_embeddings"));
  EXPECT_FALSE(c.saves("output_layer"));
  c.rank = 16, c.alpha = 32;
  EXPECT_FLOAT_EQ(c.scaling(), 2.0f);  // alpha / r
  c.rslora = true;
  EXPECT_FLOAT_EQ(c.scaling(), 8.0f);  // alpha / sqrt(r)
}

}  // namespace
}  // namespace mtrain::lora
