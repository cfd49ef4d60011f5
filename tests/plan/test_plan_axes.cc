// mtrain plan's context- and expert-parallel axes (search.h): which CP sizes
// and algorithms, EP / ETP / dispatchers it tries, that pruning drops no
// layout that fits with them, and that the printed flags of a CP and an EP
// plan re-run as a --dry_run give the memory and step time the plan printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "plan/dry_run.h"
#include "plan/memory_report.h"
#include "plan/plan_args.h"
#include "plan/plan_command.h"
#include "plan/search.h"
#include "plan/step_time.h"

namespace mtrain::plan {
namespace {

SearchOptions four(bool prune, int min_cp_tokens) {
  SearchOptions o{4, 1, prune};
  o.min_cp_tokens = min_cp_tokens;
  return o;
}

// The CP rule: CP 1, and each divisor of the ranks left after TP x PP that
// leaves every rank min_cp_tokens of a sequence, with both algorithms
// (Ulysses only where heads and query groups divide by CP x TP).
TEST(PlanAxes, ContextParallelSizesLeaveEachRankTheMinimumTokens) {
  const SearchSummary short_seq = search_layouts(parse_words(demo("demo", 512), 4), four(true, 512));
  EXPECT_FALSE(short_seq.cp_searched) << "512 tokens over 2 ranks leaves 256 < 512";
  const SearchSummary s = search_layouts(parse_words(demo("demo", 1024), 4), four(true, 256));
  EXPECT_TRUE(s.cp_searched);
  std::set<std::pair<int, std::string>> cps;
  for (const auto* list : {&s.fitting, &s.misses})
    for (const PlanResult& p : *list) cps.insert({p.layout.cp, p.layout.cp > 1 ? p.layout.cp_algo : ""});
  // 1024 / 4 = 256: CP 2 and 4 with both algorithms (4 heads, 2 groups: Ulysses CP 2 at TP 1 only;
  // CP 4 x TP 1 needs 4 query groups, so Ulysses CP 4 is invalid and never dry-run).
  const std::set<std::pair<int, std::string>> expect = {
      {1, ""}, {2, "megatron_cp_algo"}, {2, "ulysses_cp_algo"}, {4, "megatron_cp_algo"}};
  EXPECT_EQ(cps, expect);
}

// An MoE model's expert axes: EP over the divisors of both the experts (8)
// and DP, ETP 1 or TP, allgather only where it differs from alltoall.
TEST(PlanAxes, ExpertLayoutsAreTriedAndValidated) {
  const SearchSummary s = search_layouts(parse_words(demo("demo-moe", 128), 4), four(true, 4096));
  EXPECT_TRUE(s.moe);
  std::set<std::tuple<int, int, int, std::string>> seen;  // (TP, EP, ETP, dispatcher)
  for (const auto* list : {&s.fitting, &s.misses})
    for (const PlanResult& p : *list) {
      const Layout& l = p.layout;
      EXPECT_EQ(*parse_words(demo("demo-moe", 128), 4).num_experts % l.ep, 0) << p.flags;
      EXPECT_EQ(p.dp % l.ep, 0) << p.flags;
      EXPECT_TRUE(l.etp == 1 || l.etp == l.tp) << p.flags;
      seen.insert({l.tp, l.ep, l.etp, l.dispatcher});
    }
  for (const auto& key : {std::tuple{1, 1, 1, std::string("alltoall")}, std::tuple{1, 2, 1, std::string("alltoall")},
                          std::tuple{1, 4, 1, std::string("alltoall")}, std::tuple{2, 2, 1, std::string("alltoall")},
                          std::tuple{2, 1, 2, std::string("alltoall")}})
    EXPECT_TRUE(seen.count(key)) << std::get<0>(key) << " " << std::get<1>(key) << " " << std::get<2>(key);
}

// As PlanSearch.PruningDropsNothingThatFits, with the new axes: an MoE model
// (EP, ETP) and a long sequence (CP with both algorithms) on 64 MiB devices,
// where the states bound and the micro-batch rule both prune.
TEST(PlanAxes, PruningDropsNothingThatFitsWithExpertAndContextParallelism) {
  for (const auto& [words, min_tokens] : {std::pair{demo("demo-moe", 256), 4096}, std::pair{demo("demo", 1024), 256}}) {
    const config::Args base = parse_words(words, 4);
    const SearchSummary pruned = search_layouts(base, four(true, min_tokens));
    const SearchSummary all = search_layouts(base, four(false, min_tokens));
    EXPECT_GT(pruned.pruned + pruned.pruned_after_miss, 0) << words[1];
    EXPECT_EQ(all.pruned + all.pruned_after_miss, 0);
    ASSERT_EQ(pruned.fitting.size(), all.fitting.size()) << words[1];
    for (size_t i = 0; i < all.fitting.size(); ++i) EXPECT_EQ(pruned.fitting[i].flags, all.fitting[i].flags);
    EXPECT_TRUE(std::any_of(all.fitting.begin(), all.fitting.end(),
                            [](const PlanResult& p) { return p.layout.cp > 1 || p.layout.ep > 1; }))
        << words[1] << ": no CP / EP layout fits, nothing of the new axes compared";
  }
}

// The best fitting plan of each kind (CP > 1 with each algorithm, EP > 1),
// re-run as a dry run of its printed flags: the same peak and step time, and
// its communication split as the plan reported it.
TEST(PlanAxes, PrintedFlagsOfCpAndEpPlansReproduce) {
  struct Case {
    std::vector<std::string> words;
    int min_tokens;
    bool (*kind)(const Layout&);
  };
  const std::vector<Case> cases = {
      {demo("demo", 1024), 256, [](const Layout& l) { return l.cp > 1 && l.cp_algo == "megatron_cp_algo"; }},
      {demo("demo", 1024), 256, [](const Layout& l) { return l.cp > 1 && l.cp_algo == "ulysses_cp_algo"; }},
      {demo("demo-moe", 256), 4096, [](const Layout& l) { return l.ep > 1; }}};
  for (const Case& c : cases) {
    const SearchSummary s = search_layouts(parse_words(c.words, 4), four(true, c.min_tokens));
    const auto it =
        std::find_if(s.fitting.begin(), s.fitting.end(), [&](const PlanResult& p) { return c.kind(p.layout); });
    ASSERT_NE(it, s.fitting.end()) << c.words[1];
    const DryRun r = dry_run(parse_words(with_flags(c.words, it->flags), 4));
    int64_t peak = 0;
    for (const ClassMemory& k : r.classes) peak = std::max(peak, class_peak(k));
    EXPECT_EQ(peak, it->peak_bytes) << it->flags;
    EXPECT_TRUE(plan_fits(r)) << it->flags;
    const StepTime t = step_time(r);
    EXPECT_EQ(t.step_s, it->step_s) << it->flags;
    EXPECT_GT(it->layout.cp > 1 ? it->cp_comm_s : it->ep_comm_s, 0) << it->flags;
    EXPECT_EQ(it->layout.cp > 1 ? it->ep_comm_s : it->cp_comm_s, 0) << it->flags;
  }
}

// `mtrain plan --json` of a demo job at 8192 tokens (CP 2 leaves 4096 a
// rank, the command's rule): rows carry the CP layout and the communication
// split; a CP row has CP traffic and its flags, a CP 1 row none.
TEST(PlanAxes, JsonRowsCarryTheAxesAndTheCommunicationSplit) {
  const PlanOptions o = parse_plan_args({"--nproc_per_node", "2", "--top", "1000", "--json", "--model_preset", "demo",
                                         "--vocab_size", "1024", "--global_batch_size", "2", "--seq_length", "8192",
                                         "--max_position_embeddings", "8192"});
  std::ostringstream out;
  ASSERT_EQ(run_plan_command(o, out), 0);
  const nlohmann::json rows = nlohmann::json::parse(out.str());
  int cp_rows = 0;
  for (const nlohmann::json& row : rows) {
    const bool cp = row.at("cp").get<int>() > 1;
    cp_rows += cp;
    EXPECT_EQ(row.at("flags").get<std::string>().find("--context_parallel_size 2") != std::string::npos, cp);
    EXPECT_EQ(row.at("cp_comm_s").get<double>() > 0, cp) << row.dump();
    EXPECT_EQ(row.at("ep_comm_s").get<double>(), 0.0) << row.dump();
    EXPECT_TRUE(row.at("moe_token_dispatcher_type").is_null()) << "a dense model";
  }
  EXPECT_GT(cp_rows, 0) << out.str();
}

// The claims behind the search's rules after a miss (search.cc,
// cannot_fit), checked on every pair of the exhaustive searches of a dense,
// an MoE and a CP job (the claims themselves, not only that the fitting lists
// agree). Of two layouts with the same split, b "trades no memory away"
// against a when its micro-batch is as large or larger, it has the
// distributed optimizer only where a has it and SP only where a has it:
// - at the same recompute, b's peak is at least a's;
// - with a recompute that keeps as much or more (full < selective < none),
//   b's states and activation slots hold at least a's;
// - whatever the micro-batch, recompute and SP, b's weights, gradients and
//   optimizer state are at least a's when b has the distributed optimizer
//   only where a has it.
// (The peak is not monotone in recompute: DemoMoE's PP 4 stage of one layer
// and one micro-batch holds more with full recompute than without.)
TEST(PlanAxes, ALayoutThatTradesNoMemoryAwayHoldsAtLeastThePeak) {
  const auto keeps = [](const std::string& r) { return r == "full" ? 0 : r == "selective" ? 1 : 2; };
  const auto split = [](const PlanResult& p) {
    Layout l = p.layout;
    l.mbs = 0;
    l.recompute = "none";
    l.distopt = l.sp = l.overlap_param_gather = false;
    return layout_flags(l, p.num_layers);
  };
  const std::vector<std::pair<std::vector<std::string>, int>> jobs = {
      {{"--model_preset", "qwen2.5-7b", "--global_batch_size", "8", "--seq_length", "1024", "--bf16", "--train_iters",
        "1"},
       4096},
      {demo("demo-moe", 256), 4096},
      {demo("demo", 1024), 256}};
  for (const auto& [words, min_tokens] : jobs) {
    const SearchSummary all = search_layouts(parse_words(words, 4), four(false, min_tokens));
    std::vector<const PlanResult*> results;
    for (const auto* list : {&all.fitting, &all.misses})
      for (const PlanResult& p : *list) results.push_back(&p);
    int same_recompute = 0, more_kept = 0, states = 0, misses_followed = 0;
    for (const PlanResult* a : results)
      for (const PlanResult* b : results) {
        const Layout &x = a->layout, &y = b->layout;
        if (a == b || split(*a) != split(*b)) continue;
        const std::string pair = words[1] + ": " + b->flags + " against " + a->flags;
        if (y.distopt <= x.distopt) {
          ++states;
          EXPECT_GE(b->states_bytes, a->states_bytes) << pair;
        }
        if (y.mbs < x.mbs || y.distopt > x.distopt || y.sp > x.sp || keeps(y.recompute) < keeps(x.recompute)) continue;
        ++more_kept;
        EXPECT_GE(b->resident_bytes, a->resident_bytes) << pair;
        if (x.recompute != y.recompute) continue;
        ++same_recompute;
        misses_followed += !a->fits;
        EXPECT_GE(b->peak_bytes, a->peak_bytes) << pair;
      }
    EXPECT_GT(same_recompute, 0) << words[1];
    EXPECT_GT(more_kept, same_recompute) << words[1];
    EXPECT_GT(states, more_kept) << words[1];
    EXPECT_GT(misses_followed, 0) << words[1] << ": no miss to prune after";
  }
}

}  // namespace
}  // namespace mtrain::plan
