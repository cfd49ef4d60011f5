// `--model <dir>`: a Hugging Face config.json supplies the model flags below
// every other source; an explicit contradiction of the shape is an error
// naming both values, the non-shape fields may be overridden with a warning,
// --tokenizer defaults to the directory's tokenizer.json, and bad
// directories are ConfigErrors naming the file.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "config/hf_model_config.h"
#include "config_test_util.h"

namespace mtrain::config {
namespace {

using testing::error_of;
using testing::parse;
using testing::TempDir;

// The fields of Qwen2.5-0.5B's config.json (typed here): 24 layers, GQA 14/2, tied, QKV bias.
nlohmann::json qwen_config() {
  return nlohmann::json::parse(R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
    "hidden_act": "silu", "hidden_size": 896, "intermediate_size": 4864, "num_attention_heads": 14,
    "num_key_value_heads": 2, "num_hidden_layers": 24, "max_position_embeddings": 32768, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "vocab_size": 151936})");
}

// A Llama without num_key_value_heads (multi-head attention), untied.
nlohmann::json llama_config() {
  return nlohmann::json::parse(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
    "intermediate_size": 176, "num_attention_heads": 4, "num_hidden_layers": 2, "max_position_embeddings": 256,
    "rms_norm_eps": 1e-05, "vocab_size": 300})");
}

std::vector<std::string> with_model(const std::string& dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"sft", "--model", dir, "--train_iters", "10", "--max_length", "128"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(HfModelArgs, ConfigJsonSuppliesTheModelFlags) {
  TempDir dir;
  dir.write("config.json", qwen_config().dump());
  const Invocation inv = parse(with_model(dir.path()));
  const Args& a = inv.args;
  EXPECT_EQ(a.num_layers, 24);
  EXPECT_EQ(a.hidden_size, 896);
  EXPECT_EQ(a.ffn_hidden_size, 4864);
  EXPECT_EQ(a.num_attention_heads, 14);
  EXPECT_TRUE(a.group_query_attention);
  EXPECT_EQ(a.num_query_groups, 2);
  EXPECT_EQ(a.kv_channels, 64);
  EXPECT_EQ(a.vocab_size, 151936);
  EXPECT_EQ(a.max_position_embeddings, 32768);
  EXPECT_EQ(a.norm_epsilon, 1e-6);
  EXPECT_EQ(a.rotary_base, 1e6);
  EXPECT_EQ(a.normalization, "RMSNorm");
  EXPECT_TRUE(a.swiglu);
  EXPECT_EQ(a.position_embedding_type, "rope");
  EXPECT_FALSE(a.untie_embeddings_and_output_weights);
  EXPECT_FALSE(a.add_bias_linear);
  EXPECT_TRUE(a.add_qkv_bias);
  EXPECT_EQ(a.model, dir.path());
  EXPECT_FALSE(a.tokenizer.has_value());  // the directory has no tokenizer.json
  EXPECT_TRUE(inv.warnings.empty());

  // Values that agree with config.json are fine, from any source.
  const Args same = parse(with_model(dir.path(), {"--hidden_size", "896", "--tie_word_embeddings", "--num_query_groups",
                                                  "2", "--add_qkv_bias", "true"}))
                        .args;
  EXPECT_EQ(same.hidden_size, 896);
}

TEST(HfModelArgs, MultiHeadLlamaAndTheTokenizerDefault) {
  TempDir dir;
  dir.write("config.json", llama_config().dump());
  dir.write("tokenizer.json", "{}");
  const Args a = parse(with_model(dir.path())).args;
  EXPECT_FALSE(a.group_query_attention);
  EXPECT_EQ(a.num_query_groups, 4);  // the effective KV heads = attention heads
  EXPECT_EQ(a.kv_channels, 16);
  EXPECT_FALSE(a.add_qkv_bias);  // Llama has none (mtrain's default is swift's true)
  EXPECT_TRUE(a.untie_embeddings_and_output_weights);
  EXPECT_EQ(a.rotary_base, 10000);  // transformers' default rope_theta
  EXPECT_EQ(a.tokenizer, dir.path() + "/tokenizer.json");
  // An explicit --tokenizer wins.
  EXPECT_EQ(parse(with_model(dir.path(), {"--tokenizer", "other.json"})).args.tokenizer, "other.json");
}

// Llama-2 style: a SentencePiece tokenizer.model and no tokenizer.json.
TEST(HfModelArgs, SentencePieceTokenizerDefault) {
  TempDir dir;
  dir.write("config.json", llama_config().dump());
  dir.write("tokenizer.model", "");
  EXPECT_EQ(parse(with_model(dir.path())).args.tokenizer, dir.path() + "/tokenizer.model");
  dir.write("tokenizer.json", "{}");  // both: tokenizer.json wins
  EXPECT_EQ(parse(with_model(dir.path())).args.tokenizer, dir.path() + "/tokenizer.json");
}

TEST(HfModelArgs, ContradictingTheShapeIsAnErrorNamingBothValues) {
  TempDir dir;
  dir.write("config.json", qwen_config().dump());
  const std::string cli = error_of(
      [&] {
        parse(with_model(dir.path(), {"--hidden_size", "1024"}));
      },
      ExitCode::kConfig);
  EXPECT_NE(cli.find("--hidden_size 1024 contradicts --model " + dir.path() + ": " + dir.path() +
                     "/config.json has hidden_size 896 (--hidden_size 896)"),
            std::string::npos)
      << cli;
  const std::string tie = error_of(
      [&] {
        parse(with_model(dir.path(), {"--untie_embeddings_and_output_weights", "true"}));
      },
      ExitCode::kConfig);
  EXPECT_NE(tie.find("has tie_word_embeddings true (--untie_embeddings_and_output_weights false)"), std::string::npos)
      << tie;
  const std::string gqa = error_of(
      [&] {
        parse(with_model(dir.path(), {"--num_query_groups", "7"}));
      },
      ExitCode::kConfig);
  EXPECT_NE(gqa.find("has num_key_value_heads 2"), std::string::npos) << gqa;
  const std::string norm = error_of(
      [&] {
        parse(with_model(dir.path(), {"--normalization", "LayerNorm"}));
      },
      ExitCode::kConfig);
  EXPECT_NE(norm.find("--normalization LayerNorm contradicts"), std::string::npos) << norm;
  // A preset and a YAML config are explicit sources too.
  const std::string preset = error_of(
      [&] {
        parse(with_model(dir.path(), {"--model_preset", "demo"}));
      },
      ExitCode::kConfig);
  EXPECT_NE(preset.find("contradicts --model"), std::string::npos) << preset;
  const std::string yaml = dir.write("job.yaml", "num_layers: 4\n");
  const std::string from_yaml = error_of(
      [&] {
        parse({"sft", yaml, "--model", dir.path(), "--train_iters", "10", "--max_length", "128"});
      },
      ExitCode::kConfig);
  EXPECT_NE(from_yaml.find("--num_layers 4 contradicts"), std::string::npos) << from_yaml;
}

TEST(HfModelArgs, NonShapeFieldsMayBeOverriddenWithAWarning) {
  TempDir dir;
  dir.write("config.json", qwen_config().dump());
  const Invocation inv =
      parse(with_model(dir.path(), {"--rotary_base", "500000", "--max_position_embeddings", "4096"}));
  EXPECT_EQ(inv.args.rotary_base, 500000);
  EXPECT_EQ(inv.args.max_position_embeddings, 4096);
  ASSERT_EQ(inv.warnings.size(), 2u);
  EXPECT_NE(inv.warnings[0].find("--max_position_embeddings 4096 overrides --model"), std::string::npos)
      << inv.warnings[0];
  EXPECT_NE(inv.warnings[1].find("has rope_theta 1000000 (--rotary_base 1000000)"), std::string::npos)
      << inv.warnings[1];
  // --model given in the YAML config works like the flag.
  const std::string yaml = dir.write("job.yaml", "model: " + dir.path() + "\n");
  EXPECT_EQ(parse({"sft", yaml, "--train_iters", "10", "--max_length", "128"}).args.num_layers, 24);
}

TEST(HfModelArgs, BadDirectoriesNameTheFile) {
  TempDir dir;
  const std::string missing = error_of([&] { parse(with_model(dir.path() + "/absent")); }, ExitCode::kConfig);
  EXPECT_NE(missing.find("--model " + dir.path() + "/absent: not a directory"), std::string::npos) << missing;
  const std::string no_config = error_of([&] { parse(with_model(dir.path())); }, ExitCode::kConfig);
  EXPECT_NE(no_config.find("no config.json in it"), std::string::npos) << no_config;

  nlohmann::json mistral = llama_config();
  mistral["architectures"] = {"MistralForCausalLM"};
  dir.write("config.json", mistral.dump());
  const std::string arch = error_of([&] { parse(with_model(dir.path())); }, ExitCode::kConfig);
  EXPECT_NE(arch.find(dir.path() + "/config.json: unsupported architecture 'MistralForCausalLM'"), std::string::npos)
      << arch;
  nlohmann::json moe = llama_config();  // Qwen3-30B-A3B's class: refused naming what mtrain's attention lacks
  moe["architectures"] = {"Qwen3MoeForCausalLM"};
  moe["model_type"] = "qwen3_moe";
  dir.write("config.json", moe.dump());
  const std::string moe_arch = error_of([&] { parse(with_model(dir.path())); }, ExitCode::kConfig);
  EXPECT_NE(moe_arch.find("unsupported architecture 'Qwen3MoeForCausalLM' in field 'architectures': its attention "
                          "normalises q and k per head (q_norm, k_norm: q/k RMSNorm)"),
            std::string::npos)
      << moe_arch;
  nlohmann::json gelu = llama_config();
  gelu["hidden_act"] = "gelu";
  dir.write("config.json", gelu.dump());
  EXPECT_NE(error_of([&] { parse(with_model(dir.path())); }, ExitCode::kConfig).find("field 'hidden_act'"),
            std::string::npos);
  dir.write("config.json", "{\"architectures\": ");
  EXPECT_NE(error_of([&] { parse(with_model(dir.path())); }, ExitCode::kConfig).find("config.json: not valid JSON"),
            std::string::npos);
}

TEST(HfModelArgs, ImpliedFlagsCoverEveryShapeField) {
  HfConfigFields f = parse_hf_config_fields(llama_config().dump());
  std::vector<std::string> shape_flags, overridable;
  for (const HfImpliedFlag& i : hf_implied_flags(f)) (i.shape ? shape_flags : overridable).push_back(i.flag);
  EXPECT_EQ(shape_flags,
            (std::vector<std::string>{"num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
                                      "group_query_attention", "num_query_groups", "kv_channels", "vocab_size",
                                      "normalization", "swiglu", "position_embedding_type",
                                      "untie_embeddings_and_output_weights", "add_bias_linear", "add_qkv_bias"}));
  EXPECT_EQ(overridable, (std::vector<std::string>{"max_position_embeddings", "norm_epsilon", "rotary_base"}));
}

}  // namespace
}  // namespace mtrain::config
