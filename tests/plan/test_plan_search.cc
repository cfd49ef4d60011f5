// mtrain plan (lib/plan/search.h, plan_command.h): the layouts it prints are
// valid and, re-run as a --dry_run of the printed flags, give the memory and
// step time it printed; pruning drops no layout that fits; --top / --json;
// nothing fits is exit 6; bad input is a usage error.
#include <gtest/gtest.h>
#include <wordexp.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/errors.h"
#include "common/fs_test_util.h"
#include "config/cli.h"
#include "config/json.h"
#include "config/validate.h"
#include "plan/dry_run.h"
#include "plan/memory_report.h"
#include "plan/plan_args.h"
#include "plan/plan_command.h"
#include "plan/search.h"
#include "plan/step_time.h"

namespace mtrain::plan {
namespace {

const std::vector<std::string> kModel = {"--model_preset", "qwen2.5-7b", "--global_batch_size", "8", "--seq_length",
                                         "1024",           "--bf16",     "--train_iters",       "1"};

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

// An sft job with its data: the plan reads the dataset once and each
// candidate's step runs the shapes of its first global batch, so a
// --dry_run of a printed plan (which reads the data too) gives its memory
// and step time; priced at --max_length rows the same layout is slower.
TEST(PlanSearch, AnSftJobIsPlannedOnItsDatasetsLengths) {
  const std::string src = MTRAIN_SOURCE_DIR;
  const std::vector<std::string> job = {"--model_preset",      "demo",
                                        "--tokenizer",         src + "/configs/demo/tokenizer.json",
                                        "--dataset",           src + "/configs/demo/sft.jsonl",
                                        "--max_length",        "128",
                                        "--global_batch_size", "8",
                                        "--train_iters",       "1",
                                        "--lr_warmup_iters",   "0"};
  const config::Args args = parse_words(job, 4, "sft");
  std::optional<data::DataPipeline> data = read_sft_data(args);
  ASSERT_TRUE(data);
  SearchOptions o = four_devices(true);
  o.data = &*data;
  const SearchSummary s = search_layouts(args, o);
  ASSERT_FALSE(s.fitting.empty());
  const PlanResult& p = s.fitting[0];
  std::vector<std::string> words = job;
  for (const std::string& w : split(p.flags)) words.push_back(w);
  const DryRun r = dry_run(parse_words(words, 4, "sft"));
  ASSERT_FALSE(r.data_lengths.empty());
  EXPECT_LT(*std::max_element(r.data_lengths.begin(), r.data_lengths.end()), 128);
  EXPECT_EQ(plan_peak(r), p.peak_bytes) << p.flags;
  EXPECT_EQ(step_time(r).step_s, p.step_s) << p.flags;
  const SearchSummary at_max = search_layouts(args, four_devices(true));
  const auto same = std::find_if(at_max.fitting.begin(), at_max.fitting.end(),
                                 [&](const PlanResult& q) { return q.flags == p.flags; });
  ASSERT_NE(same, at_max.fitting.end()) << p.flags;
  EXPECT_GT(same->step_s, p.step_s) << "rows of --max_length take longer";
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
  EXPECT_EQ(all.pruned + all.pruned_after_miss, 0);
  ASSERT_EQ(pruned.fitting.size(), all.fitting.size());
  for (size_t i = 0; i < all.fitting.size(); ++i) EXPECT_EQ(pruned.fitting[i].flags, all.fitting[i].flags);
  // A miss whose states and slots alone exceed the device is not stepped: its peak is a lower bound of
  // the whole dry run's, above the usable HBM; the exhaustive search measures every miss whole.
  int bounded = 0;
  for (const PlanResult& m : pruned.misses) {
    if (!m.peak_is_bound) continue;
    ++bounded;
    const auto whole =
        std::find_if(all.misses.begin(), all.misses.end(), [&](const PlanResult& q) { return q.flags == m.flags; });
    ASSERT_NE(whole, all.misses.end()) << m.flags;
    EXPECT_FALSE(whole->peak_is_bound);
    EXPECT_LE(m.peak_bytes, whole->peak_bytes) << m.flags;
    EXPECT_GT(m.peak_bytes, m.usable_bytes) << m.flags;
  }
  EXPECT_GT(bounded, 0) << "no miss stopped before its step: the test does not reach it";
}

// The candidates dry-run on several threads at once give the search of one
// thread: the same counts, the same plans in the same order, the same
// numbers (each layout's micro-batches still run in turn, so the pruning of
// larger ones after a miss is the same too).
TEST(PlanSearch, ThreadsChangeNothing) {
  const config::Args base = parse_words(kModel, 4);
  SearchOptions one = four_devices(true), three = four_devices(true);
  one.threads = 1;
  three.threads = 3;
  const SearchSummary a = search_layouts(base, one), b = search_layouts(base, three);
  EXPECT_EQ(a.candidates, b.candidates);
  EXPECT_EQ(a.invalid, b.invalid);
  EXPECT_EQ(a.pruned, b.pruned);
  EXPECT_EQ(a.pruned_after_miss, b.pruned_after_miss);
  EXPECT_EQ(a.dry_run, b.dry_run);
  EXPECT_EQ(a.same_as_simpler, b.same_as_simpler);
  EXPECT_GT(a.pruned_after_miss, 0) << "no larger micro-batch was pruned: the test does not reach the grouping";
  ASSERT_EQ(a.fitting.size(), b.fitting.size());
  for (size_t i = 0; i < a.fitting.size(); ++i) {
    EXPECT_EQ(a.fitting[i].flags, b.fitting[i].flags) << i;
    EXPECT_EQ(a.fitting[i].peak_bytes, b.fitting[i].peak_bytes) << i;
    EXPECT_EQ(a.fitting[i].step_s, b.fitting[i].step_s) << i;
  }
  ASSERT_EQ(a.misses.size(), b.misses.size());
  for (size_t i = 0; i < a.misses.size(); ++i) EXPECT_EQ(a.misses[i].flags, b.misses[i].flags) << i;
}

// A layout fits when its peak on the device (the allocator's and the
// runtime's) leaves the margin free: with a margin the fitting layouts are
// exactly those without one whose peak stays within the capacity less it.
TEST(PlanSearch, MemoryMarginKeepsAShareOfTheDeviceFree) {
  const config::Args base = parse_words(kModel, 4);
  const SearchSummary none = search_layouts(base, four_devices(false));
  SearchOptions o = four_devices(false);
  o.memory_margin = 0.3;
  const SearchSummary wide = search_layouts(base, o);
  std::vector<std::string> expected, got;
  for (const PlanResult& p : none.fitting) {
    EXPECT_LE(p.peak_bytes, p.capacity_bytes);
    EXPECT_EQ(p.usable_bytes, p.capacity_bytes);
    if (static_cast<double>(p.peak_bytes) <= 0.7 * static_cast<double>(p.capacity_bytes)) expected.push_back(p.flags);
  }
  for (const PlanResult& p : wide.fitting) got.push_back(p.flags);
  std::sort(expected.begin(), expected.end());
  std::sort(got.begin(), got.end());
  ASSERT_FALSE(got.empty());
  EXPECT_LT(got.size(), none.fitting.size());  // the margin turned some layouts away
  EXPECT_EQ(got, expected);
}

// Megatron's uneven-pipeline rule, independently: the middle stages hold an
// equal share and the first / last stage one or two layers fewer.
TEST(PlanSearch, StageSplitsAreMegatronsUnevenPipelines) {
  using Splits = std::vector<std::pair<int, int>>;
  EXPECT_EQ(stage_splits(8, 1), (Splits{{0, 0}}));
  // 8 over 3: share 3 with one fewer on one side (2+3+3, 3+3+2), or share 4 with two fewer on both (2+4+2).
  EXPECT_EQ(stage_splits(8, 3), (Splits{{0, 2}, {2, 0}, {2, 2}}));
  // 32 over 4: even, or share 9 with two fewer on both (7+9+9+7).
  EXPECT_EQ(stage_splits(32, 4), (Splits{{0, 0}, {7, 7}}));
  // 48 over 2 (no middle stage): 25+23, 23+25; one or two fewer on both sides is the even 24+24, listed once.
  EXPECT_EQ(stage_splits(48, 2), (Splits{{0, 0}, {0, 23}, {23, 0}}));
  for (int pp = 2; pp <= 8; ++pp)  // each passes the CLI's validation (Megatron's rule)
    for (const auto& [first, last] : stage_splits(30, pp)) {
      std::vector<std::string> words = {"--model_preset",
                                        "demo",
                                        "--vocab_size",
                                        "1024",
                                        "--num_layers",
                                        "30",
                                        "--pipeline_model_parallel_size",
                                        std::to_string(pp),
                                        "--train_iters",
                                        "1"};
      if (first) words.insert(words.end(), {"--decoder_first_pipeline_num_layers", std::to_string(first)});
      if (last) words.insert(words.end(), {"--decoder_last_pipeline_num_layers", std::to_string(last)});
      EXPECT_NO_THROW(parse_words(words, pp)) << pp << " " << first << "/" << last;
    }
}

// 8 layers of the demo model on 3 single-NPU nodes of the 64 MiB tiny_test
// device: one stage does not hold the model (PP 1 never fits), and 3 does not
// divide 8, so every plan is uneven; the best, re-run as a dry run of its
// printed flags, fits with the same memory and step time.
TEST(PlanSearch, LayersThatTheOnlyFittingPpDoesNotDivideGetAnUnevenPlan) {
  const std::vector<std::string> model = {
      "--model_preset", "demo", "--vocab_size",     "1024",      "--num_layers",  "8", "--global_batch_size", "6",
      "--seq_length",   "128",  "--device_profile", "tiny_test", "--train_iters", "1"};
  const SearchSummary s = search_layouts(parse_words(model, 3), {1, 3, true});
  ASSERT_FALSE(s.fitting.empty());
  for (const PlanResult& p : s.fitting) {
    EXPECT_EQ(p.layout.pp, 3) << p.flags;
    EXPECT_TRUE(p.layout.first_stage_layers || p.layout.last_stage_layers) << p.flags;
  }
  const bool pp1_tried =
      std::any_of(s.misses.begin(), s.misses.end(), [](const PlanResult& p) { return p.layout.pp == 1; });
  EXPECT_TRUE(pp1_tried);
  const PlanResult& best = s.fitting.front();
  std::vector<std::string> words = model;
  for (const std::string& w : split(best.flags)) words.push_back(w);
  const DryRun r = dry_run(parse_words(words, 3));
  int64_t peak = 0;
  for (const ClassMemory& c : r.classes) peak = std::max(peak, class_peak(c));
  EXPECT_EQ(peak, best.peak_bytes) << best.flags;
  EXPECT_TRUE(plan_fits(r)) << best.flags;
  EXPECT_EQ(step_time(r).step_s, best.step_s) << best.flags;
  EXPECT_NE(best.flags.find("_pipeline_num_layers"), std::string::npos) << best.flags;
}

// With flash attention, selective recompute keeps and recomputes nothing more
// in mtrain (the attention probabilities it drops are never stored): each such
// layout measures exactly as its plain twin and is listed once, as that one.
// With the unfused attention the probabilities are dropped and recomputed, so
// selective layouts differ and are listed.
TEST(PlanSearch, SettingsThatChangeNothingAreListedOnce) {
  const SearchSummary flash = search_layouts(parse_words(kModel, 4), four_devices(true));
  EXPECT_GT(flash.same_as_simpler, 0);
  for (const PlanResult& p : flash.fitting) EXPECT_NE(p.layout.recompute, "selective") << p.flags;
  std::vector<std::string> unfused_words = kModel;
  unfused_words.insert(unfused_words.end(), {"--attention_backend", "unfused"});
  const SearchSummary unfused = search_layouts(parse_words(unfused_words, 4), four_devices(true));
  const bool selective_listed = std::any_of(unfused.fitting.begin(), unfused.fitting.end(),
                                            [](const PlanResult& p) { return p.layout.recompute == "selective"; });
  EXPECT_TRUE(selective_listed);
}

TEST(PlanCommand, TopAndJson) {
  PlanOptions o = parse_plan_args({"--nproc_per_node", "4", "--top", "2", "--model_preset", "qwen2.5-7b",
                                   "--global_batch_size", "8", "--seq_length", "1024", "--bf16"});
  std::ostringstream table;
  EXPECT_EQ(run_plan_command(o, table), 0);
  EXPECT_NE(table.str().find("\n2: mtrain pt --model_preset"), std::string::npos) << table.str();
  EXPECT_NE(table.str().find(" --nnodes 1 --nproc_per_node 4\n"), std::string::npos) << table.str();
  EXPECT_EQ(table.str().find("\n3: "), std::string::npos) << table.str();
  // The profile's default margin (Ascend910B3: 5%) and each plan's free memory.
  EXPECT_NE(table.str().find("A layout fits when its peak on the device stays within 60.80 GiB: the 64.00 GiB of HBM "
                             "less the 5% margin (--memory_margin 0.05)."),
            std::string::npos)
      << table.str();
  EXPECT_NE(table.str().find("free GiB"), std::string::npos) << table.str();
  o.json = true;
  std::ostringstream json;
  run_plan_command(o, json);
  const nlohmann::json rows = nlohmann::json::parse(json.str());
  ASSERT_EQ(rows.size(), 2u) << json.str();
  EXPECT_EQ(rows[1]["rank"], 2);
  EXPECT_EQ(rows[0]["flags"].get<std::string>().rfind("--tensor_model_parallel_size", 0), 0u) << json.str();
  EXPECT_GT(rows[0]["tokens_per_s_per_device"].get<double>(), 0);
  for (const nlohmann::json& row : rows) {
    EXPECT_EQ(row["headroom_bytes"].get<int64_t>(),
              row["capacity_bytes"].get<int64_t>() - row["peak_bytes"].get<int64_t>());
    EXPECT_LE(row["peak_bytes"].get<int64_t>(), row["usable_bytes"].get<int64_t>());
  }
}

// Nothing fits: exit 6 with what is true of this world and the smallest
// world that fits, searched the same way (not "a smaller batch").
// The job is validated per candidate layout: global batch 2 on 4 ranks is
// DP 4 at the job's own TP 1 (more ranks than rows, which Megatron refuses),
// but TP 2 x DP 2, TP 4 and PP layouts are jobs Megatron runs, and the plan
// lists them instead of refusing the job.
TEST(PlanCommand, AJobInvalidAtDpOfTheWholeWorldIsPlannedOnLayoutsWhereItIsValid) {
  std::vector<std::string> words = {"--nproc_per_node", "4", "--json"};
  for (const std::string& w : demo("demo", 128)) words.push_back(w);
  for (size_t i = 0; i + 1 < words.size(); ++i)
    if (words[i] == "--global_batch_size") words[i + 1] = "2";
  EXPECT_THROW(parse_words(std::vector<std::string>(words.begin() + 3, words.end()), 4), ConfigError)
      << "the job alone at DP 4";
  std::ostringstream out;
  ASSERT_EQ(run_plan_command(parse_plan_args(words), out), 0);
  const nlohmann::json rows = nlohmann::json::parse(out.str());
  ASSERT_FALSE(rows.empty());
  for (const nlohmann::json& row : rows) {
    const std::string flags = row["flags"];
    auto size = [&](const std::string& flag) {  // the flag's value, 1 when absent
      const size_t at = flags.find("--" + flag + " ");
      return at == std::string::npos ? 1 : std::stoi(flags.substr(at + flag.size() + 3));
    };
    const int dp =
        4 / (size("tensor_model_parallel_size") * size("pipeline_model_parallel_size") * size("context_parallel_size"));
    EXPECT_LE(dp, 2) << flags << ": DP " << dp << " cannot split 2 rows";
  }
}

TEST(PlanCommand, NothingFitsIsExitSixWithTheSmallestWorldThatFits) {
  const PlanOptions o = parse_plan_args({"--nproc_per_node", "1", "--model_preset", "qwen2.5-7b", "--global_batch_size",
                                         "8", "--seq_length", "1024", "--bf16"});
  std::ostringstream out;
  try {
    run_plan_command(o, out);
    FAIL() << "a 7B model fits on one 64 GiB device?";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.code(), ExitCode::kOutOfMemory);
    // 18 B x 7.6e9 parameters (114 GiB) on the one device: every candidate's states alone exceed it,
    // the first one too (none is dry-run to be named the "nearest miss").
    EXPECT_EQ(std::string(e.what()),
              "no layout of 1 ranks fits: of 12 candidates, 0 are invalid and the parameter states alone of the "
              "other 12 exceed the HBM");
    // On 2 devices the states alone take 18 B x 3.8e9 = 64 GiB per stage at PP 2, or (6 + 12/2) B x 7.6e9
    // = 85 GiB with the distributed optimizer at DP 2: over 60.8 GiB; 4 devices (PP 2 x DP 2, 45 GiB of
    // states) fit.
    EXPECT_EQ(e.hint(), "the smallest world that fits is 4 nodes of 1 (4 ranks): plan it with --nnodes 4");
  }
  // States that fit, activations that do not (256K tokens of Qwen2.5-0.5B on one device): the nearest
  // miss is a dry-run layout, full recompute's, with its need against the capacity less the margin.
  const PlanOptions longer =
      parse_plan_args({"--nproc_per_node", "1", "--model_preset", "qwen2.5-0.5b", "--global_batch_size", "8",
                       "--seq_length", "262144", "--max_position_embeddings", "262144", "--bf16"});
  try {
    run_plan_command(longer, out);
    FAIL() << "256K tokens fit on one device?";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("no layout of 1 ranks fits; the nearest miss (--tensor_model_parallel_size 1 "
                      "--pipeline_model_parallel_size 1 --micro_batch_size 1 --recompute_granularity full",
                      0),
              0u)
        << m;
    EXPECT_NE(m.find(" GiB of 60.80 GiB (64.00 GiB of HBM less the 5% --memory_margin), short by "), std::string::npos)
        << m;
    EXPECT_EQ(e.hint().rfind("the smallest world that fits is ", 0), 0u) << e.hint();
  }
  // With nothing fitting, the misses stopped before their step are measured whole: the nearest one's
  // peak is its dry run's.
  const config::Args job =
      parse_words({"--model_preset", "qwen2.5-0.5b", "--global_batch_size", "8", "--seq_length", "262144",
                   "--max_position_embeddings", "262144", "--bf16", "--train_iters", "1"},
                  1);
  const SearchSummary none = search_layouts(job, SearchOptions{1, 1, true});
  ASSERT_TRUE(none.fitting.empty());
  ASSERT_FALSE(none.misses.empty());
  for (const PlanResult& m : none.misses) EXPECT_FALSE(m.peak_is_bound) << m.flags;
  EXPECT_EQ(none.misses.front().peak_bytes, plan_peak(dry_run(apply_layout(job, none.misses.front().layout))));
}

// Splits a printed command as the shell would (quotes included).
std::vector<std::string> shell_words(const std::string& line) {
  wordexp_t w;
  if (wordexp(line.c_str(), &w, WRDE_NOCMD | WRDE_UNDEF) != 0) ADD_FAILURE() << "not one shell command: " << line;
  std::vector<std::string> out(w.we_wordv, w.we_wordv + w.we_wordc);
  wordfree(&w);
  return out;
}

// `mtrain plan sft ...`: the printed command is the user's sft job, its flags
// verbatim (a path with a space and a quote survives the shell), plus the layout.
TEST(PlanCommand, SftLineIsTheJobPlusTheLayout) {
  const std::vector<std::string> job = {"--model_preset",
                                        "qwen2.5-7b",
                                        "--global_batch_size",
                                        "8",
                                        "--max_length",
                                        "1024",
                                        "--bf16",
                                        "--lr",
                                        "2e-5",
                                        "--template",
                                        "qwen",
                                        "--dataset",
                                        "/data/it's my set.jsonl"};
  std::vector<std::string> plan_args = {"sft", "--nproc_per_node", "4", "--top", "1", "--json"};
  plan_args.insert(plan_args.end(), job.begin(), job.end());
  const PlanOptions o = parse_plan_args(plan_args);
  EXPECT_EQ(o.command, "sft");
  std::ostringstream out;
  ASSERT_EQ(run_plan_command(o, out), 0);
  const nlohmann::json rows = nlohmann::json::parse(out.str());
  ASSERT_EQ(rows.size(), 1u);
  std::vector<std::string> line = shell_words(rows[0]["command"].get<std::string>());
  ASSERT_GE(line.size(), 2 + job.size());
  EXPECT_EQ(std::vector<std::string>(line.begin(), line.begin() + 2), (std::vector<std::string>{"mtrain", "sft"}));
  EXPECT_EQ(std::vector<std::string>(line.begin() + 2, line.begin() + 2 + job.size()), job);

  std::vector<std::string> expected_words = job;
  for (const std::string& w : split(rows[0]["flags"].get<std::string>())) expected_words.push_back(w);
  expected_words.insert(expected_words.end(), {"--nnodes", "1", "--nproc_per_node", "4", "--train_iters", "1"});
  std::vector<std::string> printed_words(line.begin() + 2, line.end());
  printed_words.insert(printed_words.end(), {"--train_iters", "1"});
  const config::Args printed = parse_words(printed_words, 4, "sft");
  EXPECT_EQ(printed.command, "sft");
  EXPECT_EQ(config::args_to_json(printed), config::args_to_json(parse_words(expected_words, 4, "sft")));
  EXPECT_EQ(printed.tensor_model_parallel_size, rows[0]["tp"].get<int>());
  EXPECT_EQ(printed.micro_batch_size, rows[0]["mbs"].get<int>());
}

// The job's YAML may carry the world: it counts unless plan's own flags say
// otherwise, and the printed line names the world it was planned for.
TEST(PlanCommand, TheJobsYamlWorldUnderPlansFlags) {
  testing::TempDir dir;
  const std::string job = dir / "job.yaml";
  std::ofstream(job) << "model_preset: demo\nvocab_size: 1024\nglobal_batch_size: 8\nnproc_per_node: 4\n";
  std::ostringstream yaml_world;
  ASSERT_EQ(run_plan_command(parse_plan_args({job, "--top", "1", "--json"}), yaml_world), 0);
  const nlohmann::json yaml_rows = nlohmann::json::parse(yaml_world.str());
  ASSERT_EQ(yaml_rows.size(), 1u);
  EXPECT_NE(yaml_rows[0]["command"].get<std::string>().find("--nnodes 1 --nproc_per_node 4"), std::string::npos)
      << yaml_rows[0]["command"];
  EXPECT_EQ(yaml_rows[0]["tp"].get<int>() * yaml_rows[0]["pp"].get<int>() * yaml_rows[0]["dp"].get<int>(), 4);
  std::ostringstream flag_world;
  ASSERT_EQ(run_plan_command(parse_plan_args({job, "--nproc_per_node", "2", "--top", "1", "--json"}), flag_world), 0);
  const nlohmann::json flag_rows = nlohmann::json::parse(flag_world.str());
  ASSERT_EQ(flag_rows.size(), 1u);
  EXPECT_NE(flag_rows[0]["command"].get<std::string>().find("--nnodes 1 --nproc_per_node 2"), std::string::npos)
      << flag_rows[0]["command"];
}

// `mtrain plan sft --dry_run_lengths ...`: the job planned on samples of
// those lengths, as a --dry_run of the same flags steps them: the top plan's
// command re-run as `--dry_run --dry_run_lengths` of the same lengths gives
// its peak and step time; every layout is faster on them than on rows of
// --max_length. The printed commands leave the flag out; --dry_run_samples
// reads N samples of each file; the validation is --dry_run's.
TEST(PlanCommand, AnSftJobIsPlannedOnDryRunLengthsAndSamples) {
  const std::string src = MTRAIN_SOURCE_DIR;
  const std::vector<std::string> job = {"sft",
                                        "--model_preset",
                                        "demo",
                                        "--tokenizer",
                                        src + "/configs/demo/tokenizer.json",
                                        "--max_length",
                                        "128",
                                        "--global_batch_size",
                                        "8",
                                        "--nproc_per_node",
                                        "4",
                                        "--top",
                                        "1000",
                                        "--json"};
  const auto plan = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = job;
    a.insert(a.end(), extra.begin(), extra.end());
    std::ostringstream out;
    EXPECT_EQ(run_plan_command(parse_plan_args(a), out), 0);
    return nlohmann::json::parse(out.str());
  };
  const nlohmann::json at_max = plan({});
  ASSERT_FALSE(at_max.empty());
  const nlohmann::json short_rows = plan({"--dry-run-lengths=33:6,65:2"});
  ASSERT_FALSE(short_rows.empty());
  std::vector<std::string> top = {"--model_preset", "demo", "--tokenizer",         src + "/configs/demo/tokenizer.json",
                                  "--max_length",   "128",  "--global_batch_size", "8",
                                  "--train_iters",  "1",    "--dry_run",           "--dry_run_lengths",
                                  "33:6,65:2"};
  for (const std::string& w : split(short_rows[0]["flags"].get<std::string>())) top.push_back(w);
  const DryRun r = dry_run(parse_words(top, 4, "sft"));
  EXPECT_EQ(plan_peak(r), short_rows[0]["peak_bytes"].get<int64_t>());
  EXPECT_EQ(step_time(r).step_s, short_rows[0]["step_s"].get<double>());
  for (const nlohmann::json& row : short_rows) {
    EXPECT_EQ(row["command"].get<std::string>().find("dry"), std::string::npos) << row["command"];
    const auto same =
        std::find_if(at_max.begin(), at_max.end(), [&](const nlohmann::json& r) { return r["flags"] == row["flags"]; });
    if (same == at_max.end()) continue;  // fits on the shorter rows only
    EXPECT_LT(row["step_s"].get<double>(), (*same)["step_s"].get<double>()) << row["flags"];
  }
  const nlohmann::json sampled = plan({"--dataset", src + "/configs/demo/sft.jsonl", "--dry_run_samples", "8"});
  ASSERT_FALSE(sampled.empty());
  EXPECT_EQ(sampled[0]["command"].get<std::string>().find("dry_run_samples"), std::string::npos);
  // The dry run's checks: lengths stand in for a dataset; samples need one.
  std::vector<std::string> both = job;
  both.insert(both.end(), {"--dataset", src + "/configs/demo/sft.jsonl", "--dry_run_lengths", "33:8"});
  std::ostringstream sink;
  EXPECT_THROW(run_plan_command(parse_plan_args(both), sink), ConfigError);
  std::vector<std::string> no_data = job;
  no_data.insert(no_data.end(), {"--dry_run_samples", "8"});
  EXPECT_THROW(run_plan_command(parse_plan_args(no_data), sink), ConfigError);
}

TEST(PlanCommand, BadInputIsAUsageError) {
  EXPECT_THROW(parse_plan_args({"--nproc_per_node", "0"}), UsageError);
  EXPECT_THROW(parse_plan_args({"--nnodes", "x"}), UsageError);
  EXPECT_THROW(parse_plan_args({"--top"}), UsageError);
  EXPECT_THROW(parse_plan_args({"--tensor_model_parallel_size", "2"}), UsageError);
  EXPECT_THROW(parse_plan_args({"--decoder-first-pipeline-num-layers=3"}), UsageError);
  for (const char* axis : {"--context_parallel_size", "--context-parallel-algo", "--expert_model_parallel_size",
                           "--expert_tensor_parallel_size", "--moe_token_dispatcher_type"})
    EXPECT_THROW(parse_plan_args({axis, "2"}), UsageError) << axis << ": the plan chooses it";
  EXPECT_THROW(parse_plan_args({"--nproc-per-node=0"}), UsageError);
  for (const char* dry : {"--dry_run_lengths", "--dry-run-samples"}) {  // an sft job's data
    EXPECT_THROW(parse_plan_args({dry, "100"}), UsageError) << dry << " of a pt job";
    EXPECT_THROW(parse_plan_args({"sft", dry}), UsageError) << dry << " without its value";
  }
  EXPECT_DOUBLE_EQ(*parse_plan_args({"--memory_margin", "0.1"}).memory_margin, 0.1);
  EXPECT_DOUBLE_EQ(*parse_plan_args({"--memory-margin=12.5%"}).memory_margin, 0.125);
  EXPECT_FALSE(parse_plan_args({}).memory_margin.has_value());  // the profile's
  for (const char* bad : {"1", "-0.1", "x", "150%", ""}) {
    try {
      parse_plan_args({"--memory_margin", bad});
      ADD_FAILURE() << "--memory_margin " << bad << " accepted";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()), std::string("--memory_margin ") + bad +
                                           ": expected a share of the HBM from 0 to below 1, or a percentage");
    }
  }
  EXPECT_THROW(parse_plan_args({"--memory_margin"}), UsageError);
  const PlanOptions eq = parse_plan_args({"pt", "--nproc-per-node=4", "--nnodes=2"});
  EXPECT_EQ(eq.nproc_per_node, 4);
  EXPECT_EQ(eq.nnodes, 2);
  EXPECT_TRUE(eq.model_args.empty());
}

}  // namespace
}  // namespace mtrain::plan
