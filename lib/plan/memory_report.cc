#include "plan/memory_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <vector>

#include "common/errors.h"
#include "config/validate.h"
#include "plan/step_time.h"

namespace mtrain::plan {

using device::MemCategory;

static double gib(int64_t b) { return static_cast<double>(b) / (1LL << 30); }

int64_t class_peak(const ClassMemory& c) { return c.stats.device_peak(); }

int64_t collapse_peak(const DryRun& r, const ClassMemory& c) {
  const int64_t extra = c.stats.contingent;
  return class_peak(c) + extra + static_cast<int64_t>(static_cast<double>(extra) * r.profile.runtime.fragmentation);
}

// How the MoE expert buffers are planned (moe::MoeLayerConfig::planned_expert_rows).
static std::string expert_buffer_basis(const DryRun& r) {
  const model::MoeSettings& m = r.whole_model.moe;
  if (m.router.capacity_factor)
    return fmt::format("expert buffers planned for the capacity (--moe_expert_capacity_factor {})",
                       *m.router.capacity_factor);
  if (m.routing_imbalance == 1.0) return "expert buffers planned for balanced routing (--moe_routing_imbalance 1)";
  return fmt::format("expert buffers planned for {0}x the balanced share (--moe_routing_imbalance {0})",
                     m.routing_imbalance);
}

int64_t plan_peak(const DryRun& r) {
  int64_t peak = 0;
  for (const ClassMemory& c : r.classes) peak = std::max(peak, class_peak(c));
  return peak;
}

bool plan_fits(const DryRun& r) {
  return std::all_of(r.classes.begin(), r.classes.end(),
                     [&](const ClassMemory& c) { return class_peak(c) <= r.profile.hbm_bytes; });
}

static int64_t category(const ClassMemory& c, MemCategory k) { return c.stats.by_category[static_cast<int>(k)]; }

// The category with the most bytes: where a change helps most.
static MemCategory dominant(const ClassMemory& c) {
  MemCategory best = MemCategory::kWeights;
  for (int k = 0; k < static_cast<int>(MemCategory::kCount); ++k)
    if (c.stats.by_category[k] > category(c, best)) best = static_cast<MemCategory>(k);
  return best;
}

std::vector<ReportGroup> report_groups(const DryRun& r) {
  std::vector<ReportGroup> groups;
  for (const ClassMemory& c : r.classes) {
    auto g = std::find_if(groups.begin(), groups.end(), [&](const ReportGroup& x) {
      return x.shown->rank_class.stage == c.rank_class.stage && x.shown->parameters == c.parameters;
    });
    if (g == groups.end()) {
      groups.push_back({&c, {}, 0});
      g = groups.end() - 1;
    }
    if (class_peak(c) > class_peak(*g->shown)) g->shown = &c;
    g->ranks.insert(g->ranks.end(), c.rank_class.ranks.begin(), c.rank_class.ranks.end());
    ++g->simulated;
  }
  for (ReportGroup& g : groups) std::sort(g.ranks.begin(), g.ranks.end());
  return groups;
}

static std::string class_block(const DryRun& r, const ReportGroup& g) {
  const ClassMemory& c = *g.shown;
  const RankClass& k = c.rank_class;
  std::string s =
      fmt::format("pipeline stage {}: simulated rank {} (tensor rank {}, data rank {}) stands for rank{} {}\n", k.stage,
                  k.representative, c.tp_rank, c.dp_rank, g.ranks.size() == 1 ? "" : "s", ranks_text(g.ranks));
  if (g.simulated > 1)
    s += fmt::format("  ({} distributed-optimizer shards simulated; the largest is shown)\n", g.simulated);
  s += fmt::format("  parameters on this device {:>27}\n", c.parameters);
  for (int i = 0; i < static_cast<int>(MemCategory::kCount); ++i) {
    const auto cat = static_cast<MemCategory>(i);
    if (cat == MemCategory::kOther && c.stats.by_category[i] == 0) continue;
    const std::string name = cat == MemCategory::kActivations
                                 ? fmt::format("activations ({} micro-batch{} in flight)", c.activation_slots,
                                               c.activation_slots == 1 ? "" : "es")
                                 : device::mem_category_name(cat);
    s += fmt::format("  {:<40} {:>10.2f} GiB\n", name, gib(c.stats.by_category[i]));
  }
  const int64_t peak = class_peak(c), cap = r.profile.hbm_bytes;
  const device::RuntimeMemory& rt = r.profile.runtime;
  s += fmt::format("  {:<40} {:>10.2f} GiB\n",
                   rt.fragmentation > 0
                       ? fmt::format("allocator reserve ({:.1f}% fragmentation)", 100 * rt.fragmentation)
                       : std::string("allocator reserve (block rounding)"),
                   gib(c.stats.max_reserved - c.stats.max_allocated));
  s += fmt::format("  {:<40} {:>10.2f} GiB\n", "peak allocated", gib(c.stats.max_allocated));
  s += fmt::format("  {:<40} {:>10.2f} GiB\n", "peak reserved", gib(c.stats.max_reserved));
  if (c.stats.runtime_bytes() > 0) {
    s += "  held outside the allocator:\n";
    for (int k = 0; k < static_cast<int>(device::RuntimeKind::kCount); ++k) {
      if (c.stats.runtime[k] == 0) continue;
      const auto kind = static_cast<device::RuntimeKind>(k);
      std::string what = device::runtime_kind_name(kind);
      if (kind == device::RuntimeKind::kCollectiveBuffers) what = "collective buffers";
      s += fmt::format("    {:<38} {:>10.2f} GiB\n", what, gib(c.stats.runtime[k]));
    }
    if (!c.communicators.empty()) {
      std::string names;
      for (const std::string& n : c.communicators) names += (names.empty() ? "" : ", ") + n;
      s += fmt::format("      {} communicator{} ({}){}\n", c.communicators.size(),
                       c.communicators.size() == 1 ? "" : "s", names,
                       rt.library == device::CollectiveLibrary::kHccl
                           ? fmt::format(", 2 x HCCL_BUFFSIZE ({} MB) each", rt.hccl_buffsize_bytes >> 20)
                           : std::string());
    }
  }
  s += fmt::format("  {:<40} {:>10.2f} GiB\n", "peak on the device", gib(peak));
  s += fmt::format("  {:<40} {:>10.2f} GiB\n", "capacity", gib(cap));
  s += fmt::format("  {:<40} {:>10.2f} GiB  {}\n", "headroom", gib(cap - peak), peak <= cap ? "FITS" : "DOES NOT FIT");
  if (c.stats.contingent > 0) {
    const int64_t worst = collapse_peak(r, c);
    s += "  " + expert_buffer_basis(r) + "\n";
    s += fmt::format("  {:<40} {:>10.2f} GiB  (+{:.2f} GiB; not the verdict)\n",
                     "if routing collapses onto these experts", gib(worst), gib(worst - peak));
  }
  return s;
}

// What the step was fed: no data, or the shapes of the dataset's first global batch.
static std::string data_line(const DryRun& r) {
  if (r.data_lengths.empty()) return "no data read";
  const auto [lo, hi] = std::minmax_element(r.data_lengths.begin(), r.data_lengths.end());
  double mean = 0;
  for (int64_t t : r.data_lengths) mean += static_cast<double>(t) / static_cast<double>(r.data_lengths.size());
  const std::string rows = *lo == *hi ? fmt::format("{} tokens a row", *lo)
                                      : fmt::format("{} to {} tokens a row, mean {:.0f}", *lo, *hi, mean);
  return fmt::format(
      "its rows the lengths of the first global batch of {}\n  (data parallel rank 0: {} micro-batch{} of {}; "
      "activation slots for {})",
      r.data_source, r.data_lengths.size(), r.data_lengths.size() == 1 ? "" : "es", rows, r.seq_length);
}

std::string memory_report(const DryRun& r) {
  std::string s = fmt::format(
      "Dry run: {}\n  {} rank{} (tensor parallel {}, pipeline parallel {}, data parallel {}{}) on {} "
      "({:.2f} GiB HBM each)\n  shape-only construction of the real model, optimizer and activation slots, "
      "then one training iteration; {}\n\n",
      r.model_description, r.world_size, r.world_size == 1 ? "" : "s", r.tp, r.pp, r.dp,
      r.cp > 1 ? fmt::format(", context parallel {}", r.cp) : "", r.profile.name, gib(r.profile.hbm_bytes),
      data_line(r));
  for (const ReportGroup& g : report_groups(r)) s += class_block(r, g) + "\n";
  s += plan_fits(r) ? "The plan FITS on every device.\n" : "The plan DOES NOT FIT.\n";
  return s;
}

namespace {
// One setting a hint may change, as the command line spells it.
struct Change {
  std::string flags;
  std::function<void(config::Args&)> apply;
};
// What a set of changes gives, dry-run checked.
struct Outcome {
  std::string flags;
  int64_t peak = 0;
  double step_s = 0;
};
}  // namespace

// The knobs a user turns when a job does not fit, each with its
// alternatives (one taken at most), the gentlest first: the distributed
// optimizer; selective, then full recompute; a smaller micro-batch, halved
// down to 1 (the global batch kept: more gradient accumulation); twice,
// four times the tensor or pipeline parallelism (TP within a node).
static std::vector<std::vector<Change>> knobs(const config::Args& a, int devices_per_node) {
  std::vector<std::vector<Change>> out;
  if (!a.use_distributed_optimizer && a.data_parallel_size > 1)
    out.push_back({{"--use_distributed_optimizer", [](config::Args& x) { x.use_distributed_optimizer = true; }}});
  std::vector<Change> recompute;
  if (a.recompute_granularity == "none")
    recompute.push_back(
        {"--recompute_granularity selective", [](config::Args& x) { x.recompute_granularity = "selective"; }});
  if (a.recompute_granularity != "full")
    recompute.push_back(
        {"--recompute_granularity full --recompute_method uniform --recompute_num_layers 1", [](config::Args& x) {
           x.recompute_granularity = "full";
           x.recompute_method = "uniform";
           x.recompute_num_layers = 1;
         }});
  if (!recompute.empty()) out.push_back(recompute);
  std::vector<Change> micro;
  for (int b = a.micro_batch_size / 2; b >= 1; b /= 2)
    micro.push_back({fmt::format("--micro_batch_size {}", b), [b](config::Args& x) { x.micro_batch_size = b; }});
  if (!micro.empty()) out.push_back(micro);
  std::vector<Change> tp, pp;
  for (int f : {2, 4}) {
    const int t = a.tensor_model_parallel_size * f, p = a.pipeline_model_parallel_size * f;
    if (t <= devices_per_node)
      tp.push_back({fmt::format("--tensor_model_parallel_size {}", t),
                    [t](config::Args& x) { x.tensor_model_parallel_size = t; }});
    pp.push_back({fmt::format("--pipeline_model_parallel_size {}", p),
                  [p](config::Args& x) { x.pipeline_model_parallel_size = p; }});
  }
  if (!tp.empty()) out.push_back(tp);
  out.push_back(pp);
  return out;
}

// `changed`'s dry run when it is a valid layout for the same world and fits.
static std::optional<Outcome> fits_after(config::Args changed, int world_size, const std::string& flags) {
  try {
    config::validate(changed, world_size);  // and derives DP and the micro-batches per step
    const DryRun d = dry_run(changed, DryRunData::kShapes);
    if (!plan_fits(d)) return std::nullopt;
    return Outcome{flags, plan_peak(d), step_time(d).step_s};
  } catch (const ConfigError&) {
    return std::nullopt;  // not a valid layout for this world (e.g. heads not divisible by TP)
  }
}

// The fastest (simulated step time) of the fitting changes of one knob;
// else of two knobs, three, ...: each combination takes one alternative of
// each of its knobs (with several knobs, each knob's strongest: the smallest
// micro-batch, full recompute, 4 x TP / PP); nullopt when nothing fits.
static std::optional<Outcome> cheapest_fitting_change(const config::Args& args, int devices_per_node) {
  const std::vector<std::vector<Change>> k = knobs(args, devices_per_node);
  std::optional<Outcome> best;
  auto consider = [&](const std::optional<Outcome>& o) {
    if (o && (!best || o->step_s < best->step_s)) best = o;
  };
  for (const auto& alternatives : k)
    for (const Change& ch : alternatives) {
      config::Args changed = args;
      ch.apply(changed);
      consider(fits_after(changed, args.world_size, ch.flags));
    }
  const int n = static_cast<int>(k.size());
  for (int size = 2; !best && size <= n; ++size) {
    std::vector<bool> pick(n, false);
    std::fill(pick.end() - size, pick.end(), true);
    do {
      config::Args changed = args;
      std::string flags;
      for (int i = 0; i < n; ++i) {
        if (!pick[i]) continue;
        const Change& strongest = k[i].back();
        strongest.apply(changed);
        flags += (flags.empty() ? "" : " ") + strongest.flags;
      }
      consider(fits_after(changed, args.world_size, flags));
    } while (std::next_permutation(pick.begin(), pick.end()));
  }
  return best;
}

void require_fit(const DryRun& r, const config::Args& args) {
  if (plan_fits(r)) return;
  const std::vector<ReportGroup> groups = report_groups(r);
  const ReportGroup* worst_group = &groups.front();
  for (const ReportGroup& g : groups)
    if (class_peak(*g.shown) > class_peak(*worst_group->shown)) worst_group = &g;
  const ClassMemory* worst = worst_group->shown;
  const MemCategory dom = dominant(*worst);
  const std::optional<Outcome> fix = cheapest_fitting_change(args, r.profile.devices_per_node);
  throw OutOfMemoryError(
      fmt::format("the plan does not fit: pipeline stage {} (rank{} {}) needs {:.2f} GiB of {} HBM{}, capacity "
                  "{:.2f} GiB, short by {:.2f} GiB; the largest part is {} ({:.2f} GiB; --dry_run of the same flags "
                  "shows every part)",
                  worst->rank_class.stage, worst_group->ranks.size() == 1 ? "" : "s", ranks_text(worst_group->ranks),
                  gib(class_peak(*worst)), r.profile.name,
                  worst->stats.runtime_bytes() > 0
                      ? fmt::format(" ({:.2f} GiB of it held outside the allocator: runtime, collective buffers)",
                                    gib(worst->stats.runtime_bytes()))
                      : std::string(),
                  gib(r.profile.hbm_bytes), gib(class_peak(*worst) - r.profile.hbm_bytes),
                  device::mem_category_name(dom), gib(category(*worst, dom))),
      !fix ? "neither the distributed optimizer, recompute, a smaller micro-batch (down to 1) nor 2 or 4 times the "
             "tensor or pipeline parallelism (alone or together) fits on this many devices; plan with more nodes "
             "(mtrain plan --nnodes N)"
           : fmt::format("the cheapest change that fits (dry-run checked; the fastest of those that fit): {} "
                         "(peak {:.2f} GiB on the device of {:.2f} GiB, simulated step {:.3f} s)",
                         fix->flags, gib(fix->peak), gib(r.profile.hbm_bytes), fix->step_s));
}

int64_t host_need(const DryRun& r, const std::vector<int>& local_ranks) {
  int64_t need = 0;
  for (int rank : local_ranks)
    for (const ClassMemory& c : r.classes)
      if (std::find(c.rank_class.ranks.begin(), c.rank_class.ranks.end(), rank) != c.rank_class.ranks.end())
        need += c.stats.max_host;
  return need;
}

void require_host_fit(const DryRun& r, const std::vector<int>& local_ranks, int64_t available) {
  const int64_t need = host_need(r, local_ranks);
  if (available < 0 || need <= available) return;
  throw OutOfMemoryError(
      fmt::format("host out of memory: the run's {} rank{} on this machine need{} {} MiB of RAM for the real fp32 "
                  "tensors of the simulated NPUs, only {} MiB are available",
                  local_ranks.size(), local_ranks.size() == 1 ? "" : "s", local_ranks.size() == 1 ? "s" : "",
                  need >> 20, available >> 20),
      "the simulated NPUs have room (checked shape-only); train a smaller model or fewer ranks per machine here, "
      "or plan the job with --dry_run (memory per device, nothing allocated on the host)");
}

}  // namespace mtrain::plan
