// args.json: every flag of the table under its canonical name, and a lossless roundtrip.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "config/flags.h"
#include "config/json.h"
#include "config/validate.h"
#include "config_test_util.h"

namespace mtrain::config {
namespace {

using testing::parse;

TEST(ArgsJson, HasEveryTableKeyWithTypedValues) {
  Args a = parse({"pretrain", "--model_preset", "gpt2-124m", "--train_iters", "3", "--dataset", "x.jsonl", "y.jsonl",
                  "--lr", "6e-4", "--loss_scale", "512", "--fp16", "--seed", "7"})
               .args;
  auto j = nlohmann::json::parse(args_to_json(a));
  for (const auto& spec : flag_table()) EXPECT_TRUE(j.contains(std::string(spec.name))) << spec.name;
  EXPECT_EQ(j.size(),
            flag_table().size() + 5);  // + command, config_file, world_size, data_parallel_size, micro batches
  EXPECT_EQ(j["command"], "pt");
  EXPECT_EQ(j["num_layers"], 12);
  EXPECT_EQ(j["normalization"], "LayerNorm");
  EXPECT_DOUBLE_EQ(j["lr"].get<double>(), 6e-4);
  EXPECT_EQ(j["dataset"], nlohmann::json::array({"x.jsonl", "y.jsonl"}));
  EXPECT_TRUE(j["load"].is_null());
  EXPECT_EQ(j["loss_scale"], "all");
  EXPECT_DOUBLE_EQ(j["static_loss_scale"].get<double>(), 512.0);
  EXPECT_EQ(j["fp16"], true);
  EXPECT_EQ(j["seed"], 7);
  EXPECT_EQ(j["ffn_hidden_size"], 3072);
  EXPECT_EQ(j["num_micro_batches"], 16);
}

TEST(ArgsJson, RoundtripIsLossless) {
  Args a = parse({"sft",
                  "--model_preset",
                  "qwen2.5-0.5b",
                  "--max_length",
                  "512",
                  "--train_iters",
                  "9",
                  "--dataset",
                  "a.jsonl",
                  "--no_rope_fusion",
                  "--lr_warmup_fraction",
                  "0.1",
                  "--norm_epsilon",
                  "1e-6",
                  "--initial_loss_scale",
                  "65536",
                  "--recompute_granularity",
                  "full",
                  "--recompute_method",
                  "block",
                  "--recompute_num_layers",
                  "3",
                  "--on_nonfinite",
                  "skip",
                  "--bf16"})
               .args;
  const std::string once = args_to_json(a);
  Args b = args_from_json(once);
  EXPECT_EQ(args_to_json(b), once);
  EXPECT_EQ(b.dataset, a.dataset);
  EXPECT_FALSE(b.apply_rope_fusion);
  EXPECT_DOUBLE_EQ(b.norm_epsilon, 1e-6);
  EXPECT_EQ(*b.max_length, 512);
  validate(b, 1);  // a resolved config validates again unchanged
  EXPECT_EQ(args_to_json(b), once);
}

TEST(ArgsJson, UnknownKeysAndBadValuesAreConfigErrors) {
  EXPECT_EQ(testing::error_of([] { args_from_json(R"({"num_layerz": 2})"); }, ExitCode::kConfig),
            "args.json: unknown key 'num_layerz'");
  EXPECT_EQ(testing::error_of([] { args_from_json(R"({"num_layers": "two"})"); }, ExitCode::kConfig),
            "args.json: key 'num_layers': got 'two' but expected an integer");
  EXPECT_EQ(testing::error_of([] { args_from_json("[1, 2]"); }, ExitCode::kConfig),
            "args.json: expected a JSON object");
}

}  // namespace
}  // namespace mtrain::config
