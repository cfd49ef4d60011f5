#include "plan/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "common/errors.h"
#include "config/validate.h"
#include "plan/dry_run.h"
#include "plan/formula_compare.h"
#include "plan/memory_report.h"
#include "plan/step_time.h"
#include "train/rank_build.h"

namespace mtrain::plan {

// 0.85 of Megatron's weights + grads + optimizer bytes (formula_compare.h):
// the formula assumes bf16 weights with fp32 grads and master copy (18 bytes
// a parameter, 6 + 12/DP with the distributed optimizer); an fp32 model holds
// 16 (no master copy), 8/9 of it; the margin covers rounding in the formula.
// The dry run holds at least that much, so a layout whose bound exceeds the
// device cannot fit (tests compare with the exhaustive search). Without a
// known vocabulary (the dry run reads it from the tokenizer) one token stands
// in: the embedding's share of the bound only shrinks.
// An uneven pipeline's first stage holds --decoder_first_pipeline_num_layers:
// the bound is taken for that stage (the formula spreads num_layers evenly).
static bool hopeless(config::Args a, int64_t capacity) {
  if (a.train_type == "lora") return false;  // the formula counts states for every weight; LoRA trains few
  if (!a.vocab_size) a.vocab_size = 1;
  // The distributed optimizer shards over DP x CP (Megatron's data-parallel
  // group with context parallelism); the formula's d is DP alone.
  a.data_parallel_size *= a.context_parallel_size;
  if (a.decoder_first_pipeline_num_layers)
    a.num_layers = *a.decoder_first_pipeline_num_layers * a.pipeline_model_parallel_size;
  return 0.85 * megatron_formulas(a).states > static_cast<double>(capacity);
}

// The HBM a fitting peak stays within: the capacity less the margin.
static int64_t usable_bytes(const device::DeviceProfile& p, double memory_margin) {
  return static_cast<int64_t>(static_cast<double>(p.hbm_bytes) * (1 - memory_margin));
}

// Dry-runs a candidate. abandon: a class whose states and activation slots
// alone exceed the usable HBM ends the dry run unstepped (a certain miss;
// its peak_bytes then only a lower bound, PlanResult::peak_is_bound).
static PlanResult measure(const config::Args& a, const Layout& l, double memory_margin, data::DataPipeline* data,
                          bool abandon) {
  PlanResult p;
  p.layout = l;
  p.dp = a.data_parallel_size;
  p.num_layers = a.num_layers;
  p.flags = layout_flags(l, a.num_layers);
  const device::DeviceProfile profile = train::device_profile(a);
  p.capacity_bytes = profile.hbm_bytes;
  p.usable_bytes = usable_bytes(profile, memory_margin);
  const DryRun r = dry_run(a, data, /*repeat_steady_state=*/true, abandon ? p.usable_bytes : 0);
  p.peak_bytes = plan_peak(r);
  for (const ClassMemory& c : r.classes) {
    const auto& held = c.stats.by_category;
    const int64_t states = held[static_cast<int>(device::MemCategory::kWeights)] +
                           held[static_cast<int>(device::MemCategory::kGrads)] +
                           held[static_cast<int>(device::MemCategory::kOptimizer)];
    p.states_bytes = std::max(p.states_bytes, states);
    p.resident_bytes = std::max(p.resident_bytes, states + c.slot_bytes);
  }
  if (r.abandoned) {
    p.peak_bytes = std::max(p.peak_bytes, p.resident_bytes);
    p.peak_is_bound = true;
    return p;
  }
  p.fits = p.peak_bytes <= p.usable_bytes;
  const StepTime t = step_time(r);
  p.step_s = t.step_s;
  p.tokens_per_s_per_device = t.tokens_per_s_per_device;
  p.mfu = t.mfu;
  for (const StageTime& st : t.stages)
    if (st.tp_comm_s + st.cp_comm_s + st.ep_comm_s >= p.tp_comm_s + p.cp_comm_s + p.ep_comm_s)
      p.tp_comm_s = st.tp_comm_s, p.cp_comm_s = st.cp_comm_s, p.ep_comm_s = st.ep_comm_s;
  return p;
}

// How many settings a layout turns on beyond the plainest (none < selective < full recompute).
static int complexity(const Layout& l) {
  return (l.recompute == "selective" ? 1 : l.recompute == "full" ? 2 : 0) + l.distopt + l.sp;
}

// Same model split and micro-batch; exactly one of recompute, distributed optimizer, SP differs.
static bool differ_in_one_setting(const Layout& a, const Layout& b) {
  const bool same_split = a.tp == b.tp && a.pp == b.pp && a.vpp == b.vpp && a.mbs == b.mbs &&
                          a.first_stage_layers == b.first_stage_layers && a.last_stage_layers == b.last_stage_layers &&
                          a.cp == b.cp && a.cp_algo == b.cp_algo && a.ep == b.ep && a.etp == b.etp &&
                          a.dispatcher == b.dispatcher;
  return same_split && (a.recompute != b.recompute) + (a.distopt != b.distopt) + (a.sp != b.sp) == 1;
}

// Drops a fitting layout when a simpler one, one setting away, measured the
// same memory and step time (both are computed by the same code from the dry
// runs, so "the same" is exact equality): that setting changed nothing.
static void drop_same_as_simpler(SearchSummary& s) {
  std::vector<PlanResult> kept;
  for (const PlanResult& p : s.fitting) {
    const bool same = std::any_of(s.fitting.begin(), s.fitting.end(), [&](const PlanResult& q) {
      return complexity(q.layout) < complexity(p.layout) && differ_in_one_setting(p.layout, q.layout) &&
             q.peak_bytes == p.peak_bytes && q.step_s == p.step_s;
    });
    if (same)
      ++s.same_as_simpler;
    else
      kept.push_back(p);
  }
  s.fitting = std::move(kept);
}

// The layout's flags without the settings a dry run of another can rule out:
// micro-batch, recompute, distributed optimizer, SP (cannot_fit).
static std::string split_of(Layout l, int num_layers) {
  l.mbs = 0;
  l.recompute = "none";
  l.distopt = l.sp = l.overlap_param_gather = false;
  return layout_flags(l, num_layers);
}

// How much of each layer a recompute granularity keeps for backward: full
// recompute each layer's input, selective all but the attention core's,
// none everything.
static int recompute_keeps(const std::string& r) { return r == "full" ? 0 : r == "selective" ? 1 : 2; }

// b trades no memory away against a (same split): a micro-batch as large or
// larger, the distributed optimizer only if a has it, SP only if a has it;
// with `same_recompute` a's recompute, else one that keeps as much or more.
// A larger micro-batch grows every activation and row in flight; without the
// distributed optimizer each rank holds the whole optimizer state; without SP
// the norms and dropouts keep the whole sequence; less recompute keeps more
// of each layer in every slot.
static bool trades_no_memory_away(const Layout& b, const Layout& a, bool same_recompute) {
  const bool recompute =
      same_recompute ? a.recompute == b.recompute : recompute_keeps(b.recompute) >= recompute_keeps(a.recompute);
  return recompute && b.mbs >= a.mbs && b.distopt <= a.distopt && b.sp <= a.sp;
}

// What a miss of a layout of the same split rules out for `c` (each claim
// held to exhaustive searches by PlanAxes.*TradesNoMemoryAway*):
// - c trades no memory away at the same recompute: its peak is at least the
//   miss's. Not across recompute: full recompute keeps each layer's input
//   beside the layer it recomputes, more than none holds on a stage of one
//   layer and one micro-batch.
// - Its states and activation slots (held together through the step: the
//   peak is at least their sum) exceed the device, and c trades no memory
//   away, recompute included: c holds at least as much in both.
// - Its weights, gradients and optimizer state alone exceed the device (the
//   same under any micro-batch, recompute and SP) and c has the distributed
//   optimizer only where it had it.
static bool cannot_fit(const Layout& c, const PlanResult& miss) {
  const Layout& m = miss.layout;
  if (trades_no_memory_away(c, m, true)) return true;
  if (miss.resident_bytes > miss.usable_bytes && trades_no_memory_away(c, m, false)) return true;
  return miss.states_bytes > miss.usable_bytes && c.distopt <= m.distopt;
}

namespace {

// A layout the search dry-runs unless a miss of its split rules it out.
struct Candidate {
  size_t order;  // its place in enumerate_layouts
  Layout layout;
  config::Args args;
};

// Dry-runs each group's candidates (one split, its memory settings; those
// that hold the least first) but none that a miss rules out (cannot_fit). Groups run on `threads` threads at once;
// each candidate's result lands in results[its index], so the outcome is
// the same for any count.
void measure_groups(const std::vector<std::vector<const Candidate*>>& groups, const SearchOptions& o, int threads,
                    std::vector<std::optional<PlanResult>>& results, ProgressBar& bar, int64_t done_before) {
  std::atomic<size_t> next{0};
  std::mutex progress;
  int64_t done = done_before;
  int fitting = 0;
  std::vector<std::exception_ptr> failed(groups.size());
  const auto work = [&] {
    for (size_t g; (g = next.fetch_add(1)) < groups.size();) {
      try {
        std::vector<const PlanResult*> missed;
        for (const Candidate* c : groups[g]) {
          if (o.prune &&
              std::any_of(missed.begin(), missed.end(), [&](const PlanResult* m) { return cannot_fit(c->layout, *m); }))
            continue;
          PlanResult p = measure(c->args, c->layout, o.memory_margin, o.data, o.prune);
          const bool fits = p.fits;
          results[c->order] = std::move(p);
          if (!fits) missed.push_back(&*results[c->order]);
          const std::lock_guard<std::mutex> lock(progress);
          fitting += fits;
          bar.update(++done, fmt::format("fit={}", fitting));
        }
      } catch (...) {
        failed[g] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : failed)
    if (e) std::rethrow_exception(e);  // the first group's in search order
}

}  // namespace

SearchSummary search_layouts(const config::Args& base, const SearchOptions& o) {
  const int world = o.nnodes * o.nproc_per_node;
  SearchSummary s;
  // What a fitting peak stays within, known before the first dry run so
  // that the first candidate is pruned like the rest.
  const device::DeviceProfile profile = train::device_profile(base);
  const int64_t capacity = usable_bytes(profile, o.memory_margin);
  const std::vector<Layout> layouts = enumerate_layouts(base, o);
  s.moe = base.num_experts.has_value();
  s.cp_searched = std::any_of(layouts.begin(), layouts.end(), [](const Layout& l) { return l.cp > 1; });
  // The candidates Megatron's validation and the states' bound leave, grouped
  // by their layout without the micro-batch (enumerated smallest first).
  std::vector<Candidate> candidates;
  std::vector<std::vector<const Candidate*>> groups;
  std::map<std::string, size_t> group_of;
  for (const Layout& l : layouts) {
    ++s.candidates;
    config::Args a = apply_layout(base, l);
    try {
      config::validate(a, world);
    } catch (const ConfigError&) {
      ++s.invalid;  // Megatron would refuse it too
      continue;
    }
    if (o.prune && hopeless(a, capacity)) {
      ++s.pruned;
      continue;
    }
    candidates.push_back({candidates.size(), l, std::move(a)});
  }
  for (const Candidate& c : candidates) {
    const std::string others = o.prune ? split_of(c.layout, c.args.num_layers) : std::to_string(c.order);
    const auto [it, added] = group_of.emplace(others, groups.size());
    if (added) groups.emplace_back();
    groups[it->second].push_back(&c);
  }
  // Those that can hold the least first: a candidate is tried after every one it holds at least the memory of.
  for (std::vector<const Candidate*>& g : groups)
    std::stable_sort(g.begin(), g.end(), [](const Candidate* x, const Candidate* y) {
      const Layout &a = x->layout, &b = y->layout;
      const int ka = a.mbs * 12 + recompute_keeps(a.recompute) * 4 + !a.distopt * 2 + !a.sp;
      const int kb = b.mbs * 12 + recompute_keeps(b.recompute) * 4 + !b.distopt * 2 + !b.sp;
      return ka < kb;
    });
  ProgressBar bar("Plan", static_cast<int64_t>(layouts.size()), o.progress);
  bar.set_unit("layout");
  // A dry run holds one rank's objects at a time and only reads what the
  // candidates share (an sft job's data: each source copies its samples).
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = std::min<int>(o.threads > 0 ? o.threads : cores, static_cast<int>(groups.size()));
  std::vector<std::optional<PlanResult>> results(candidates.size());
  measure_groups(groups, o, std::max(1, threads), results, bar, s.invalid + s.pruned);
  for (std::optional<PlanResult>& p : results) {
    if (!p) {
      ++s.pruned_after_miss;
      continue;
    }
    ++s.dry_run;
    (p->fits ? s.fitting : s.misses).push_back(std::move(*p));
  }
  // Nothing fits: the nearest miss is printed, so the misses stopped at a lower bound are measured whole.
  if (s.fitting.empty()) {
    std::vector<std::vector<const Candidate*>> again;
    std::map<std::string, const Candidate*> by_flags;
    for (const Candidate& c : candidates) by_flags[layout_flags(c.layout, c.args.num_layers)] = &c;
    for (const PlanResult& m : s.misses)
      if (m.peak_is_bound) again.push_back({by_flags.at(m.flags)});
    std::vector<std::optional<PlanResult>> whole(candidates.size());
    SearchOptions exact = o;
    exact.prune = false;  // each measured whole (prune also selects abandoning)
    if (!again.empty())
      measure_groups(again, exact, std::max(1, std::min<int>(threads, static_cast<int>(again.size()))), whole, bar,
                     s.candidates - static_cast<int64_t>(again.size()));
    for (PlanResult& m : s.misses)
      if (m.peak_is_bound) m = std::move(*whole[by_flags.at(m.flags)->order]);
  }
  bar.update(s.candidates, fmt::format("fit={}", s.fitting.size()));
  bar.close();
  std::stable_sort(s.fitting.begin(), s.fitting.end(), [](const PlanResult& x, const PlanResult& y) {
    if (x.tokens_per_s_per_device != y.tokens_per_s_per_device)
      return x.tokens_per_s_per_device > y.tokens_per_s_per_device;
    return x.peak_bytes < y.peak_bytes;
  });
  drop_same_as_simpler(s);
  std::stable_sort(s.misses.begin(), s.misses.end(),
                   [](const PlanResult& x, const PlanResult& y) { return x.peak_bytes < y.peak_bytes; });
  return s;
}

}  // namespace mtrain::plan
