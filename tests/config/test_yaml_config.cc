// YAML job configs: precedence (preset < YAML < command line), includes, ENV,
// and errors naming file:line:col.
#include <gtest/gtest.h>

#include <cstdlib>

#include "config/cli.h"
#include "config_test_util.h"

namespace mtrain::config {
namespace {

using testing::config_error;
using testing::parse;
using testing::TempDir;

TEST(YamlConfig, KeysAreFlagsAndTheCommandLineOverrides) {
  TempDir dir;
  std::string job = dir.write("job.yaml",
                              "model_preset: demo\n"
                              "train_iters: 20\n"
                              "lr: 1.0e-4\n"
                              "num-layers: 3\n"
                              "save: out_from_yaml\n"
                              "no_rope_fusion: true\n"
                              "log_throughput: yes\n"
                              "dataset_shuffle: False\n"
                              "dataset: [a.jsonl, b.jsonl]\n"
                              "val_dataset: v.jsonl\n");
  Args a = parse({"sft", job, "--lr", "2e-4"}).args;
  EXPECT_DOUBLE_EQ(*a.lr, 2e-4);
  EXPECT_EQ(a.num_layers, 3);
  EXPECT_EQ(*a.train_iters, 20);
  EXPECT_EQ(a.output_dir, "out_from_yaml");
  EXPECT_FALSE(a.apply_rope_fusion);
  EXPECT_TRUE(a.log_throughput);
  EXPECT_FALSE(a.dataset_shuffle);
  EXPECT_EQ(a.dataset, (std::vector<std::string>{"a.jsonl", "b.jsonl"}));
  EXPECT_EQ(a.val_dataset, std::vector<std::string>{"v.jsonl"});
  EXPECT_EQ(a.config_file, job);

  Args b = parse({"sft", "--config", job, "--num_layers", "2", "--dataset", "c.jsonl"}).args;
  EXPECT_EQ(b.num_layers, 2);
  EXPECT_DOUBLE_EQ(*b.lr, 1e-4);
  EXPECT_EQ(b.dataset, std::vector<std::string>{"c.jsonl"});
}

TEST(YamlConfig, PresetBelowYamlBelowCommandLine) {
  TempDir dir;
  std::string job = dir.write("job.yaml",
                              "model_preset: demo\n"
                              "hidden_size: 384\n"
                              "train_iters: 5\n");
  Args a = parse({"sft", job, "--num_layers", "6"}).args;
  EXPECT_EQ(a.hidden_size, 384);        // YAML over preset
  EXPECT_EQ(a.num_layers, 6);           // command line over preset
  EXPECT_EQ(a.num_attention_heads, 4);  // from the preset
  EXPECT_EQ(a.model_preset, "demo");

  // A preset named on the command line replaces the YAML's, still below the YAML's keys.
  Args b = parse({"sft", job, "--model_preset", "gpt2-124m"}).args;
  EXPECT_EQ(b.model_preset, "gpt2-124m");
  EXPECT_EQ(b.normalization, "LayerNorm");
  EXPECT_EQ(b.hidden_size, 384);
  EXPECT_EQ(b.num_layers, 12);
}

TEST(YamlConfig, IncludePullsInPresetsAndFilesFirst) {
  TempDir dir;
  dir.write("base/common.yaml", "train_iters: 7\nglobal_batch_size: 8\nlr: 3.0e-4\n");
  std::string job = dir.write("job.yaml",
                              "include: [demo, base/common.yaml]\n"
                              "lr: 5.0e-4\n");
  Args a = parse({"sft", job}).args;
  EXPECT_EQ(a.hidden_size, 256);
  EXPECT_EQ(*a.train_iters, 7);
  EXPECT_EQ(a.global_batch_size, 8);
  EXPECT_DOUBLE_EQ(*a.lr, 5e-4);  // the including file wins

  std::string cyc = dir.write("cycle.yaml", "include: cycle.yaml\n");
  EXPECT_EQ(config_error({"sft", cyc}), cyc + ": include cycle (" + cyc + " includes itself)");
}

TEST(YamlConfig, YamlNullResetsAnOptional) {
  TempDir dir;
  std::string job = dir.write("job.yaml", "model_preset: gpt2-124m\nvocab_size: ~\ntrain_iters: 1\n");
  EXPECT_FALSE(parse({"sft", job}).args.vocab_size.has_value());
  EXPECT_EQ(*parse({"sft", "--model_preset", "gpt2-124m", "--train_iters", "1"}).args.vocab_size, 50257);
}

TEST(YamlConfig, EnvBlockSetsOnlyUnsetVariables) {
  TempDir dir;
  ::unsetenv("MTRAIN_TEST_ENV_NEW");
  ::setenv("MTRAIN_TEST_ENV_OLD", "from_shell", 1);
  std::string job = dir.write("job.yaml",
                              "model_preset: demo\n"
                              "train_iters: 1\n"
                              "ENV:\n"
                              "  MTRAIN_TEST_ENV_NEW: 42\n"
                              "  MTRAIN_TEST_ENV_OLD: from_yaml\n");
  Invocation inv = parse({"sft", job});
  ASSERT_NE(std::getenv("MTRAIN_TEST_ENV_NEW"), nullptr);
  EXPECT_STREQ(std::getenv("MTRAIN_TEST_ENV_NEW"), "42");
  EXPECT_STREQ(std::getenv("MTRAIN_TEST_ENV_OLD"), "from_shell");
  ASSERT_EQ(inv.warnings.size(), 1u);
  EXPECT_EQ(inv.warnings[0], "MTRAIN_TEST_ENV_OLD is already set in environment, using from_shell");
  ::unsetenv("MTRAIN_TEST_ENV_NEW");
  ::unsetenv("MTRAIN_TEST_ENV_OLD");
}

// What the launcher reads before it decides to start ranks: the YAML's
// dry_run / nnodes / nproc_per_node under the command line's, no validation
// (a world of 4 is not known yet), and the ENV block left for the ranks.
TEST(YamlConfig, PeekArgsReadsTheLaunchSettingsWithoutApplyingEnv) {
  TempDir dir;
  ::unsetenv("MTRAIN_TEST_PEEK_ENV");
  std::string job = dir.write("job.yaml",
                              "model_preset: demo\n"
                              "dry_run: true\n"
                              "nproc_per_node: 4\n"
                              "nnodes: 2\n"
                              "ENV:\n"
                              "  MTRAIN_TEST_PEEK_ENV: 1\n");
  const std::vector<const char*> argv = {"mtrain", "sft", job.c_str(), "--nnodes", "3"};
  const std::optional<Args> a = peek_args(static_cast<int>(argv.size()), argv.data());
  ASSERT_TRUE(a.has_value());
  EXPECT_TRUE(a->dry_run);
  EXPECT_EQ(a->nproc_per_node, 4);
  EXPECT_EQ(a->nnodes, 3);
  EXPECT_EQ(std::getenv("MTRAIN_TEST_PEEK_ENV"), nullptr);
  const std::vector<const char*> help = {"mtrain", "sft", job.c_str(), "--help"};
  EXPECT_FALSE(peek_args(static_cast<int>(help.size()), help.data()).has_value());

  std::string bad = dir.write("bad.yaml", "model_preset: demo\ndry_run: perhaps\n");
  const std::vector<const char*> bad_argv = {"mtrain", "pt", bad.c_str()};
  try {
    peek_args(static_cast<int>(bad_argv.size()), bad_argv.data());
    FAIL() << "dry_run: perhaps accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(bad + ":2:10: invalid value for 'dry_run'"), std::string::npos) << e.what();
  }
}

TEST(YamlConfig, UnknownKeyNamesLineColumnAndSuggests) {
  TempDir dir;
  std::string job = dir.write("job.yaml",
                              "model_preset: demo\n"
                              "train_iters: 1\n"
                              "tensor_model_paralel_size: 2\n");
  EXPECT_EQ(config_error({"sft", job}),
            job + ":3:1: unknown key 'tensor_model_paralel_size'; did you mean 'tensor_model_parallel_size'?");
  std::string nested = dir.write("nested.yaml", "model_preset: demo\nENV:\n  A: 1\n  lrr: 2\nlrr: 3\n");
  EXPECT_EQ(config_error({"sft", nested}), nested + ":5:1: unknown key 'lrr'; did you mean 'lr'?");
}

TEST(YamlConfig, BadSyntaxNamesLineAndColumn) {
  TempDir dir;
  std::string job = dir.write("job.yaml",
                              "model_preset: demo\n"
                              "train_iters: 1\n"
                              "dataset: [a.jsonl, b.jsonl\n"
                              "lr: 1\n");
  std::string msg = config_error({"sft", job});
  EXPECT_EQ(msg.rfind(job + ":4:", 0), 0u) << msg;
  EXPECT_NE(msg.find("invalid YAML: "), std::string::npos) << msg;

  std::string tab = dir.write("tab.yaml", "lr: 1\n  bad: indentation: here\n");
  std::string msg2 = config_error({"sft", tab});
  EXPECT_EQ(msg2.rfind(tab + ":2:", 0), 0u) << msg2;
}

TEST(YamlConfig, BadValueNamesPositionKeyValueAndExpectation) {
  TempDir dir;
  std::string job = dir.write("job.yaml",
                              "model_preset: demo\n"
                              "num_layers:   abc\n");
  EXPECT_EQ(config_error({"sft", job}),
            job + ":2:15: invalid value for 'num_layers': got 'abc' but expected an integer");
  std::string b = dir.write("bool.yaml", "train_iters: 1\nbf16: maybe\n");
  EXPECT_EQ(config_error({"sft", b}),
            b + ":2:7: invalid value for 'bf16': Truthy value expected: got maybe but expected one of yes/no, "
                "true/false, t/f, y/n, 1/0 (case insensitive).");
  std::string c = dir.write("choice.yaml", "normalization: layernorm\n");
  EXPECT_EQ(config_error({"sft", c}),
            c + ":1:16: invalid value for 'normalization': invalid choice: 'layernorm' (choose from 'LayerNorm', "
                "'RMSNorm'); did you mean 'LayerNorm'?");
  std::string l = dir.write("list.yaml", "lr: [1, 2]\n");
  EXPECT_EQ(config_error({"sft", l}),
            l + ":1:5: invalid value for 'lr': got 2 values but expected a single value (a number)");
  std::string m = dir.write("map.yaml", "dataset:\n  a: 1\n");
  EXPECT_EQ(config_error({"sft", m}), m + ":2:3: key 'dataset': got a mapping but expected a value or a list");
}

TEST(YamlConfig, MissingFileAndUnknownPreset) {
  EXPECT_EQ(config_error({"sft", "/nonexistent/job.yaml"}), "config file not found: /nonexistent/job.yaml");
  TempDir dir;
  std::string job = dir.write("job.yaml", "train_iters: 1\nmodel_preset: llama2-7\n");
  EXPECT_EQ(config_error({"sft", job}), job + ":2:15: unknown model preset 'llama2-7'; did you mean 'llama2-7b'?");
  EXPECT_EQ(testing::usage_error({"sft", job, "--config", job}).rfind("two config files given", 0), 0u);
}

TEST(YamlConfig, EmptyFileSetsNothing) {
  TempDir dir;
  std::string job = dir.write("empty.yaml", "");
  EXPECT_EQ(parse({"sft", job, "--model_preset", "demo", "--train_iters", "1"}).args.num_layers, 4);
}

}  // namespace
}  // namespace mtrain::config
