// mtrain plan under --train_type lora: the states bound that prunes layouts
// counts Megatron's full-training states, so it must not prune a LoRA job
// (whose base has none); on one 910B3 a 7B LoRA job has fitting layouts
// where full fine-tuning has none.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/cli.h"
#include "plan/search.h"

namespace mtrain::plan {
namespace {

config::Args parse(const std::string& train_type) {
  std::vector<std::string> words = {"mtrain",
                                    "sft",
                                    "--model_preset",
                                    "llama2-7b",
                                    "--bf16",
                                    "--seq_length",
                                    "2048",
                                    "--global_batch_size",
                                    "16",
                                    "--train_iters",
                                    "1",
                                    "--train_type",
                                    train_type};
  std::vector<const char*> argv;
  for (const std::string& w : words) argv.push_back(w.c_str());
  config::ParseOptions o;
  o.world_size = 1;
  return config::parse_command_line(static_cast<int>(argv.size()), argv.data(), o).args;
}

TEST(LoraPlanSearch, OneDeviceFitsLoraNotFullAndPruningDropsNothing) {
  const SearchOptions one_device{1, 1, true};
  EXPECT_TRUE(search_layouts(parse("full"), one_device).fitting.empty());
  const SearchSummary pruned = search_layouts(parse("lora"), one_device);
  const SearchSummary all = search_layouts(parse("lora"), SearchOptions{1, 1, false});
  EXPECT_EQ(pruned.pruned, 0);
  ASSERT_GT(all.fitting.size(), 1u);
  ASSERT_EQ(pruned.fitting.size(), all.fitting.size());
  for (size_t i = 0; i < all.fitting.size(); ++i) EXPECT_EQ(pruned.fitting[i].flags, all.fitting[i].flags);
}

}  // namespace
}  // namespace mtrain::plan
