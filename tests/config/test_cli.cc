// Command-line parsing: spellings, booleans, negations, aliases, lists,
// subcommands, unknown flags and bad values.
#include <gtest/gtest.h>

#include "config/cli.h"
#include "config/flags.h"
#include "config_test_util.h"

namespace mtrain::config {
namespace {

using testing::config_error;
using testing::parse;
using testing::parse_sft;
using testing::sft_with;
using testing::usage_error;

TEST(Cli, UnderscoreHyphenAndEqualsSpellingsSetTheSameField) {
  EXPECT_EQ(parse_sft({"--num_layers", "2"}).num_layers, 2);
  EXPECT_EQ(parse_sft({"--num-layers", "3"}).num_layers, 3);
  EXPECT_EQ(parse_sft({"--num-layers=5"}).num_layers, 5);
  EXPECT_EQ(parse_sft({"--num_layers=6"}).num_layers, 6);
  EXPECT_DOUBLE_EQ(*parse_sft({"--lr=2e-4"}).lr, 2e-4);
  EXPECT_EQ(parse_sft({"--lr-decay-style", "inverse-square-root"}).lr_decay_style, "inverse-square-root");
}

TEST(Cli, EveryBooleanForm) {
  const std::vector<std::pair<std::string, bool>> forms = {
      {"true", true}, {"false", false}, {"yes", true}, {"no", false},  {"t", true},   {"f", false},  {"y", true},
      {"n", false},   {"1", true},      {"0", false},  {"TRUE", true}, {"No", false}, {"YeS", true}, {"F", false}};
  for (const auto& [text, expected] : forms) {
    EXPECT_EQ(parse_sft({"--log_throughput", text}).log_throughput, expected) << text;
    EXPECT_EQ(parse_sft({"--dataset_shuffle", text}).dataset_shuffle, expected) << text;
    EXPECT_EQ(parse_sft({"--log-throughput=" + text}).log_throughput, expected) << text;
  }
  EXPECT_TRUE(parse_sft({"--log_throughput"}).log_throughput);
  EXPECT_TRUE(parse_sft({"--log_throughput", "--lr", "1e-4"}).log_throughput);
  EXPECT_FALSE(parse_sft({}).log_throughput);
}

TEST(Cli, BadBooleanValueIsAUsageErrorNamingTheFlag) {
  EXPECT_EQ(usage_error(sft_with({"--log_throughput", "maybe"})),
            "invalid value for --log_throughput: Truthy value expected: got maybe but expected one of yes/no, "
            "true/false, t/f, y/n, 1/0 (case insensitive).");
  EXPECT_EQ(usage_error(sft_with({"--no-rope-fusion", "2"})),
            "invalid value for --no_rope_fusion: Truthy value expected: got 2 but expected one of yes/no, "
            "true/false, t/f, y/n, 1/0 (case insensitive).");
}

TEST(Cli, NegationsInvertTheValue) {
  const std::vector<std::pair<std::string, bool Args::*>> negations = {
      {"no_masked_softmax_fusion", &Args::masked_softmax_fusion},
      {"no_bias_dropout_fusion", &Args::bias_dropout_fusion},
      {"no_bias_swiglu_fusion", &Args::bias_swiglu_fusion},
      {"no_rope_fusion", &Args::apply_rope_fusion},
      {"no_gradient_accumulation_fusion", &Args::gradient_accumulation_fusion},
      {"no_cross_entropy_loss_fusion", &Args::cross_entropy_loss_fusion},
      {"no_use_fused_rmsnorm", &Args::use_fused_rmsnorm},
      {"no_check_for_nan_in_loss_and_grad", &Args::check_for_nan_in_loss_and_grad},
      {"no_swiglu", &Args::swiglu},
  };
  for (const auto& [name, field] : negations) {
    EXPECT_TRUE(parse_sft({}).*field) << name << " default";
    EXPECT_FALSE(parse_sft({"--" + name}).*field) << name;
    EXPECT_FALSE(parse_sft({"--" + name, "true"}).*field) << name;
    EXPECT_TRUE(parse_sft({"--" + name, "false"}).*field) << name;
    EXPECT_FALSE(parse_sft({hyphen_spelling(name)}).*field) << name;
  }
}

TEST(Cli, FusionSpellingsOfSwiftV3V4MegatronAndMindSpeedLandInOneField) {
  for (std::string flag : {"--bias_swiglu_fusion", "--bias_activation_fusion", "--use_fused_swiglu",
                           "--bias-activation-fusion", "--bias_gelu_fusion"}) {
    EXPECT_FALSE(parse_sft({flag, "false"}).bias_swiglu_fusion) << flag;
    EXPECT_TRUE(parse_sft({"--no_bias_swiglu_fusion", flag}).bias_swiglu_fusion) << flag;
  }
  EXPECT_FALSE(parse_sft({"--no_bias_activation_fusion"}).bias_swiglu_fusion);
  EXPECT_FALSE(parse_sft({"--no-bias-gelu-fusion"}).bias_swiglu_fusion);
  EXPECT_FALSE(parse_sft({"--use_fused_rotary_pos_emb", "false"}).apply_rope_fusion);
  EXPECT_FALSE(parse_sft({"--apply_rope_fusion", "false"}).apply_rope_fusion);
}

TEST(Cli, LastOccurrenceWinsAcrossSpellings) {
  EXPECT_FALSE(parse_sft({"--bias_swiglu_fusion", "--no_bias_swiglu_fusion"}).bias_swiglu_fusion);
  EXPECT_TRUE(parse_sft({"--no_bias_swiglu_fusion", "--bias_activation_fusion"}).bias_swiglu_fusion);
  EXPECT_EQ(parse_sft({"--save", "a", "--output_dir", "b"}).output_dir, "b");
  EXPECT_EQ(parse_sft({"--output_dir", "b", "--save", "a"}).output_dir, "a");
}

TEST(Cli, DefaultsUseEveryFusion) {
  Args a = parse_sft({});
  EXPECT_TRUE(a.masked_softmax_fusion);
  EXPECT_TRUE(a.bias_dropout_fusion);
  EXPECT_TRUE(a.bias_swiglu_fusion);
  EXPECT_TRUE(a.cross_entropy_loss_fusion);
  EXPECT_TRUE(a.apply_rope_fusion);
  EXPECT_TRUE(a.use_fused_rmsnorm);
  EXPECT_TRUE(a.gradient_accumulation_fusion);
  EXPECT_EQ(a.attention_backend, "flash");
}

TEST(Cli, SwiftV3AndV4NamesLandInTheSameField) {
  EXPECT_EQ(parse_sft({"--save", "out1"}).output_dir, "out1");
  EXPECT_EQ(parse_sft({"--output_dir", "out2"}).output_dir, "out2");
  EXPECT_EQ(parse_sft({"--log_interval", "3"}).log_interval, 3);
  EXPECT_EQ(parse_sft({"--logging_steps", "4"}).log_interval, 4);
  EXPECT_EQ(*parse_sft({"--eval_interval", "7"}).eval_interval, 7);
  EXPECT_EQ(*parse_sft({"--eval_steps", "8"}).eval_interval, 8);
  EXPECT_EQ(parse_sft({"--train_type", "full"}).train_type, "full");
  EXPECT_EQ(parse_sft({"--tuner_type", "full"}).train_type, "full");
  EXPECT_EQ(*parse({"sft", "--model_preset", "demo", "--max_epochs", "2"}).args.num_train_epochs, 2);
  EXPECT_EQ(*parse({"sft", "--model_preset", "demo", "--num_train_epochs", "3"}).args.num_train_epochs, 3);
  EXPECT_DOUBLE_EQ(*parse_sft({"--learning_rate", "3e-4"}).lr, 3e-4);
  EXPECT_FALSE(parse_sft({"--disable_bias_linear"}).add_bias_linear);
  EXPECT_TRUE(parse_sft({"--disable_bias_linear", "false"}).add_bias_linear);
  EXPECT_TRUE(parse_sft({"--add_bias_linear"}).add_bias_linear);
  EXPECT_FALSE(parse_sft({"--tie_word_embeddings"}).untie_embeddings_and_output_weights);
}

TEST(Cli, CheckpointFlagsUnderEverySpelling) {
  for (std::string flag : {"--load", "--mcore_model", "--mcore-model"})
    EXPECT_EQ(*parse_sft({flag, "ckpt"}).load, "ckpt");
  for (std::string flag : {"--save_interval", "--save_steps", "--save-steps", "--persistent_save_interval"})
    EXPECT_EQ(parse_sft({flag, "100"}).save_interval, 100);
  EXPECT_EQ(parse_sft({"--save", "out"}).output_dir, "out");
  const Args a =
      parse_sft({"--load", "c", "--no_save_optim", "--no-load-rng", "--finetune", "--save_total_limit", "2"});
  EXPECT_TRUE(a.no_save_optim);
  EXPECT_TRUE(a.no_load_rng);
  EXPECT_TRUE(a.finetune);
  EXPECT_EQ(*a.save_total_limit, 2);
  EXPECT_EQ(parse_sft({}).save_interval, 500);  // swift's --save_steps default
}

TEST(Cli, NotYetImplementedSettingsAreRejectedUnderEverySpelling) {
  for (std::string flag : {"--merge_lora", "--merge-lora"}) {
    EXPECT_EQ(config_error(sft_with({"--train_type", "lora", flag, "true"})),
              "--merge_lora true: merging LoRA into the base weights (--merge_lora) is not supported yet");
  }
  // --adapter_load is implemented (lib/train/adapter_load.h) under both spellings.
  for (std::string flag : {"--adapter_load", "--mcore_adapter"})
    EXPECT_EQ(parse_sft({"--train_type", "lora", flag, "a"}).adapter_load, "a");
  // --dry_run is implemented (lib/plan); it parses and validates like any run.
  EXPECT_TRUE(parse_sft({"--dry_run"}).dry_run);
}

TEST(Cli, ListFlagsTakeSeveralValues) {
  Args a = parse_sft({"--dataset", "a.jsonl", "b.jsonl", "c.jsonl", "--lr", "1e-4"});
  EXPECT_EQ(a.dataset, (std::vector<std::string>{"a.jsonl", "b.jsonl", "c.jsonl"}));
  EXPECT_DOUBLE_EQ(*a.lr, 1e-4);
  EXPECT_EQ(parse_sft({"--val_dataset", "v.jsonl"}).val_dataset, std::vector<std::string>{"v.jsonl"});
  EXPECT_EQ(parse_sft({"--dataset", "a", "--dataset", "b"}).dataset, std::vector<std::string>{"b"});
  EXPECT_EQ(parse_sft({"--dataset", "pt", "sft"}).dataset, (std::vector<std::string>{"pt", "sft"}));
  EXPECT_EQ(usage_error(sft_with({"--dataset"})).rfind("invalid command line: ", 0), 0u);
}

// Megatron: --eval-interval 0 and --eval-iters 0 both switch evaluation off,
// so a job file's evaluation can be turned off from the command line.
TEST(Cli, ZeroEvalIntervalOrItersMeansNoEvaluation) {
  EXPECT_FALSE(parse_sft({"--eval_interval", "0"}).eval_interval.has_value());
  const Args a = parse_sft({"--eval_interval", "5", "--eval_iters", "0"});
  EXPECT_FALSE(a.eval_interval.has_value());
  EXPECT_EQ(a.eval_iters, 0);
  EXPECT_EQ(*parse_sft({"--eval_interval", "5", "--eval_iters", "2"}).eval_interval, 5);
  EXPECT_EQ(config_error(sft_with({"--eval_interval", "-1"})), "--eval_interval must be >= 0, got -1");
  EXPECT_EQ(config_error(sft_with({"--eval_iters", "-2"})),
            "--eval_iters must be -1 (whole validation set), 0 (no evaluation) or >= 1, got -2");
}

TEST(Cli, NegativeNumbersAreValues) {
  EXPECT_EQ(parse_sft({"--eval_iters", "-1"}).eval_iters, -1);
  EXPECT_EQ(config_error(sft_with({"--min_lr", "-0.5"})), "--min_lr must be >= 0, got -0.5");
}

TEST(Cli, UnknownFlagSuggestsTheClosestName) {
  EXPECT_EQ(usage_error(sft_with({"--tensor_model_paralel_size", "2"})),
            "unknown flag --tensor_model_paralel_size; did you mean --tensor_model_parallel_size?");
  EXPECT_EQ(usage_error(sft_with({"--tensor-model-paralel-size", "2"})),
            "unknown flag --tensor-model-paralel-size; did you mean --tensor-model-parallel-size?");
  EXPECT_EQ(usage_error(sft_with({"--logging_step=3"})), "unknown flag --logging_step; did you mean --logging_steps?");
  EXPECT_EQ(usage_error(sft_with({"--completely_unrelated_thing"})), "unknown flag --completely_unrelated_thing");
}

TEST(Cli, BadValuesAreUsageErrorsNamingTheFlag) {
  EXPECT_EQ(usage_error(sft_with({"--num_layers", "abc"})),
            "invalid value for --num_layers: got 'abc' but expected an integer");
  EXPECT_EQ(usage_error(sft_with({"--lr", "fast"})), "invalid value for --lr: got 'fast' but expected a number");
  EXPECT_EQ(usage_error(sft_with({"--normalization", "rmsnorm"})),
            "invalid value for --normalization: invalid choice: 'rmsnorm' (choose from 'LayerNorm', 'RMSNorm'); "
            "did you mean 'RMSNorm'?");
  EXPECT_EQ(usage_error(sft_with({"--model_preset", "dmeo"})),
            "invalid value for --model_preset: unknown model preset 'dmeo'; did you mean 'demo'?");
}

TEST(Cli, SubcommandsAndTheirDefaults) {
  Invocation sft = parse(sft_with({}));
  EXPECT_EQ(sft.command, "sft");
  EXPECT_EQ(*sft.args.loss_scale, "default");
  for (std::string cmd : {"pt", "pretrain"}) {
    Invocation pt = parse({cmd, "--model_preset", "demo", "--train_iters", "5"});
    EXPECT_EQ(pt.command, "pt");
    EXPECT_EQ(pt.args.command, "pt");
    EXPECT_EQ(*pt.args.loss_scale, "all");
  }
}

TEST(Cli, LossScaleIsSwiftTokenWeightingOrMegatronStaticScale) {
  Args a = parse_sft({"--loss_scale", "1024", "--fp16"});
  EXPECT_DOUBLE_EQ(*a.static_loss_scale, 1024.0);
  EXPECT_EQ(*a.loss_scale, "default");
  Args b = parse_sft({"--loss_scale", "all"});
  EXPECT_EQ(*b.loss_scale, "all");
  EXPECT_FALSE(b.static_loss_scale.has_value());
  EXPECT_EQ(parse_sft({"--loss_scale", "last_round"}).loss_scale, "last_round");
  EXPECT_EQ(usage_error(sft_with({"--loss_scale", "everything"}))
                .rfind("invalid value for --loss_scale: invalid "
                       "choice: 'everything'",
                       0),
            0u);
}

TEST(Cli, HelpVersionAndMissingOrUnknownCommand) {
  Invocation help = parse({"--help"});
  EXPECT_EQ(help.action, Invocation::Action::kHelp);
  EXPECT_NE(help.text.find("pretrain"), std::string::npos);
  Invocation sft_help = parse({"sft", "--help"});
  EXPECT_EQ(sft_help.action, Invocation::Action::kHelp);
  EXPECT_NE(sft_help.text.find("--tensor_model_parallel_size / --tensor-model-parallel-size"), std::string::npos);
  EXPECT_EQ(parse({"pretrain", "-h"}).action, Invocation::Action::kHelp);
  Invocation version = parse({"--version"});
  EXPECT_EQ(version.action, Invocation::Action::kVersion);
  EXPECT_EQ(version.text, version_text() + "\n");
  EXPECT_EQ(version.text.rfind("mtrain ", 0), 0u);
  EXPECT_EQ(usage_error({}), "missing command (one of: sft, pt, pretrain)");
  EXPECT_EQ(usage_error({"sfr"}), "unknown command 'sfr'; did you mean 'sft'?");
}

TEST(Cli, PositionalMustBeAYamlConfig) { EXPECT_EQ(usage_error(sft_with({"stray"})), "unexpected argument 'stray'"); }

TEST(Cli, AppsCanAddPassThroughCommands) {
  ParseOptions options;
  options.commands.push_back({"tokenizer", {}, "build the tokenizer", false});
  Invocation inv = parse({"tokenizer", "--vocab", "512", "corpus.txt"}, options);
  EXPECT_EQ(inv.command, "tokenizer");
  EXPECT_EQ(inv.passthrough, (std::vector<std::string>{"--vocab", "512", "corpus.txt"}));
  EXPECT_EQ(parse(sft_with({}), options).command, "sft");
}

// Only flag names are normalized: a value is passed as typed, even one that
// begins with "--" (the token after a flag that takes one value is its value),
// and a command with its own parser gets its arguments untouched.
TEST(Cli, ValuesAreNeverRewritten) {
  ParseOptions options;
  options.commands.push_back({"tokenizer", {}, "encode and decode", false});
  EXPECT_EQ(parse({"tokenizer", "--encode", "---"}, options).passthrough,
            (std::vector<std::string>{"--encode", "---"}));
  EXPECT_EQ(parse({"tokenizer", "--encode", "--foo-bar", "--show-tokens"}, options).passthrough,
            (std::vector<std::string>{"--encode", "--foo-bar", "--show-tokens"}));
  EXPECT_EQ(parse_sft({"--output-dir", "--my-run"}).output_dir, "--my-run");
  EXPECT_EQ(parse_sft({"--output_dir", "---"}).output_dir, "---");
  EXPECT_EQ(parse_sft({"--output-dir=--a-b"}).output_dir, "--a-b");
  // A flag after a value is still a flag, in either spelling.
  const Args a = parse_sft({"--output_dir", "run-1", "--num-layers", "3"});
  EXPECT_EQ(a.output_dir, "run-1");
  EXPECT_EQ(a.num_layers, 3);
}

TEST(Cli, AttentionBackendAndUseFlashAttn) {
  EXPECT_EQ(parse_sft({"--attention_backend", "unfused"}).attention_backend, "unfused");
  EXPECT_EQ(parse_sft({"--attention_backend", "auto"}).attention_backend, "flash");
  EXPECT_EQ(parse_sft({"--attention_backend", "local"}).attention_backend, "unfused");
  EXPECT_EQ(parse_sft({"--use_flash_attn"}).attention_backend, "flash");
  EXPECT_EQ(config_error(sft_with({"--use_flash_attn", "--attention_backend", "unfused"})),
            "--use_flash_attn conflicts with --attention_backend unfused");
  EXPECT_EQ(config_error(sft_with({"--attention_backend", "fused"})),
            "--attention_backend fused: the fused (cuDNN) attention backend does not exist on the simulated NPU");
}

}  // namespace
}  // namespace mtrain::config
