// mtrain plan (lib/plan/search.h, plan_command.h): the layouts it prints are
// valid and, re-run as a --dry_run of the printed flags, give the memory and
// step time it printed; pruning drops no layout that fits; --top / --json;
// nothing fits is exit 6; bad input is a usage error.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/errors.h"
#include "config/cli.h"
#include "plan/dry_run.h"
#include "plan/memory_report.h"
#include "plan/plan_command.h"
#include "plan/search.h"
#include "plan/step_time.h"

namespace mtrain::plan {
namespace {

const std::vector<std::string> kModel = {"--model_preset", "qwen2.5-7b", "--global_batch_size", "8", "--seq_length",
                                         "1024",           "--bf16",     "--train_iters",       "1"};

config::Args parse_words(std::vector<std::string> words, int world) {
  words.insert(words.begin(), {"mtrain", "pt"});
  std::vector<const char*> argv;
  for (const std::string& w : words) argv.push_back(w.c_str());
  config::ParseOptions o;
  o.world_size = world;
  return config::parse_command_line(static_cast<int>(argv.size()), argv.data(), o).args;
}

std::vector<std::string> split(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

SearchOptions four_devices(bool prune) { return {4, 1, prune}; }

TEST(PlanSearch, PrintedFlagsReRunAsDryRunGiveTheSameMemoryAndTime) {
  const SearchSummary s = search_layouts(parse_words(kModel, 4), four_devices(true));
  ASSERT_GE(s.fitting.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const PlanResult& p = s.fitting[i];
    std::vector<std::string> words = kModel;
    for (const std::string& w : split(p.flags)) words.push_back(w);
    const DryRun r = dry_run(parse_words(words, 4));  // parse validates: the layout is valid
    int64_t peak = 0;
    for (const ClassMemory& c : r.classes) peak = std::max(peak, class_peak(c));
    EXPECT_EQ(peak, p.peak_bytes) << p.flags;
    EXPECT_TRUE(plan_fits(r)) << p.flags;
    EXPECT_EQ(step_time(r).step_s, p.step_s) << p.flags;  // same computation, same inputs
  }
}

// Megatron users run with both DP overlaps whenever they apply: every plan
// with DP > 1 launches with --overlap_grad_reduce, and with the distributed
// optimizer also --overlap_param_gather; a plan without DP with neither.
TEST(PlanSearch, PlansUseTheDataParallelOverlaps) {
  const SearchSummary s = search_layouts(parse_words(kModel, 4), four_devices(true));
  int with_dp = 0;
  for (const std::vector<PlanResult>* list : {&s.fitting, &s.misses})
    for (const PlanResult& p : *list) {
      const bool grad = p.flags.find(" --overlap_grad_reduce") != std::string::npos;
      const bool param = p.flags.find(" --overlap_param_gather") != std::string::npos;
      EXPECT_EQ(grad, p.dp > 1) << p.flags;
      EXPECT_EQ(param, p.dp > 1 && p.layout.distopt) << p.flags;
      with_dp += p.dp > 1 && p.layout.distopt;
    }
  EXPECT_GT(with_dp, 0);
}

TEST(PlanSearch, RankedByTokensPerDeviceThenMemory) {
  const SearchSummary s = search_layouts(parse_words(kModel, 4), four_devices(true));
  for (size_t i = 1; i < s.fitting.size(); ++i) {
    const PlanResult &a = s.fitting[i - 1], &b = s.fitting[i];
    EXPECT_GE(a.tokens_per_s_per_device, b.tokens_per_s_per_device);
    if (a.tokens_per_s_per_device == b.tokens_per_s_per_device) {
      EXPECT_LE(a.peak_bytes, b.peak_bytes);
    }
  }
}

// 7B on 4 devices: without the distributed optimizer the states alone exceed
// 64 GiB, so some candidates are pruned; the exhaustive search agrees.
TEST(PlanSearch, PruningDropsNothingThatFits) {
  const config::Args base = parse_words(kModel, 4);
  const SearchSummary pruned = search_layouts(base, four_devices(true));
  const SearchSummary all = search_layouts(base, four_devices(false));
  EXPECT_GT(pruned.pruned, 0);
  EXPECT_EQ(all.pruned, 0);
  ASSERT_EQ(pruned.fitting.size(), all.fitting.size());
  for (size_t i = 0; i < all.fitting.size(); ++i) EXPECT_EQ(pruned.fitting[i].flags, all.fitting[i].flags);
}

TEST(PlanCommand, TopAndJson) {
  PlanOptions o = parse_plan_args({"--nproc_per_node", "4", "--top", "2", "--model_preset", "qwen2.5-7b",
                                   "--global_batch_size", "8", "--seq_length", "1024", "--bf16"});
  std::ostringstream table;
  EXPECT_EQ(run_plan_command(o, table), 0);
  EXPECT_NE(table.str().find("\n2: NNODES=1 NPROC_PER_NODE=4 mtrain pt --model_preset"), std::string::npos)
      << table.str();
  EXPECT_EQ(table.str().find("\n3: "), std::string::npos) << table.str();
  o.json = true;
  std::ostringstream json;
  run_plan_command(o, json);
  const nlohmann::json rows = nlohmann::json::parse(json.str());
  ASSERT_EQ(rows.size(), 2u) << json.str();
  EXPECT_EQ(rows[1]["rank"], 2);
  EXPECT_EQ(rows[0]["flags"].get<std::string>().rfind("--tensor_model_parallel_size", 0), 0u) << json.str();
  EXPECT_GT(rows[0]["tokens_per_s_per_device"].get<double>(), 0);
}

TEST(PlanCommand, NothingFitsIsExitSixWithTheNearestMiss) {
  const PlanOptions o = parse_plan_args({"--nproc_per_node", "1", "--model_preset", "qwen2.5-7b", "--global_batch_size",
                                         "8", "--seq_length", "1024", "--bf16"});
  std::ostringstream out;
  try {
    run_plan_command(o, out);
    FAIL() << "a 7B model fits on one 64 GiB device?";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.code(), ExitCode::kOutOfMemory);
    EXPECT_NE(std::string(e.what()).find("nearest miss"), std::string::npos) << e.what();
  }
}

TEST(PlanCommand, BadInputIsAUsageError) {
  EXPECT_THROW(parse_plan_args({"--nproc_per_node", "0"}), UsageError);
  EXPECT_THROW(parse_plan_args({"--nnodes", "x"}), UsageError);
  EXPECT_THROW(parse_plan_args({"--top"}), UsageError);
  EXPECT_THROW(parse_plan_args({"--tensor_model_parallel_size", "2"}), UsageError);
}

}  // namespace
}  // namespace mtrain::plan
