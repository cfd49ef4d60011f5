#include "plan/search.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/errors.h"
#include "config/validate.h"
#include "plan/dry_run.h"
#include "plan/formula_compare.h"
#include "plan/memory_report.h"
#include "plan/step_time.h"

namespace mtrain::plan {

std::string layout_flags(const Layout& l, int num_layers) {
  std::string f = fmt::format("--tensor_model_parallel_size {} --pipeline_model_parallel_size {}", l.tp, l.pp);
  if (l.vpp > 1) f += fmt::format(" --num_layers_per_virtual_pipeline_stage {}", num_layers / (l.pp * l.vpp));
  f += fmt::format(" --micro_batch_size {} --recompute_granularity {}", l.mbs, l.recompute);
  if (l.recompute == "full") f += " --recompute_method uniform --recompute_num_layers 1";
  f += fmt::format(" --use_distributed_optimizer {} --sequence_parallel {}", l.distopt, l.sp);
  if (l.overlap_grad_reduce) f += " --overlap_grad_reduce";
  if (l.overlap_param_gather) f += " --overlap_param_gather";
  return f;
}

config::Args apply_layout(const config::Args& base, const Layout& l) {
  config::Args a = base;
  a.tensor_model_parallel_size = l.tp;
  a.pipeline_model_parallel_size = l.pp;
  a.virtual_pipeline_model_parallel_size.reset();
  a.num_layers_per_virtual_pipeline_stage.reset();
  if (l.vpp > 1) a.num_layers_per_virtual_pipeline_stage = base.num_layers / (l.pp * l.vpp);
  a.micro_batch_size = l.mbs;
  a.recompute_granularity.reset();
  a.recompute_method.reset();
  a.recompute_num_layers.reset();
  if (l.recompute != "none") a.recompute_granularity = l.recompute;
  if (l.recompute == "full") {
    a.recompute_method = "uniform";
    a.recompute_num_layers = 1;
  }
  a.use_distributed_optimizer = l.distopt;
  a.sequence_parallel = l.sp;
  a.overlap_grad_reduce = l.overlap_grad_reduce;
  a.overlap_param_gather = l.overlap_param_gather;
  return a;
}

static std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// Every layout of the loops' cross product that the rules allow;
// the CLI's validation then rejects what Megatron would (heads % TP, ...).
static std::vector<Layout> enumerate(const config::Args& base, const SearchOptions& o) {
  const int world = o.nnodes * o.nproc_per_node;
  std::vector<Layout> out;
  for (int tp : divisors(o.nproc_per_node))
    for (int pp : divisors(world / tp)) {
      if (base.num_layers % pp != 0) continue;
      const int dp = world / (tp * pp);
      if (base.global_batch_size % dp != 0) continue;
      for (int vpp : divisors(base.num_layers / pp)) {
        if (vpp > 1 && pp == 1) continue;
        for (int mbs : divisors(base.global_batch_size / dp))
          for (const char* rc : {"none", "selective", "full"})
            for (bool distopt : {false, true}) {
              if (distopt && dp == 1) continue;
              for (bool sp : {false, true}) {
                if (sp && tp == 1) continue;
                out.push_back({tp, pp, vpp, mbs, rc, distopt, sp, dp > 1, distopt && dp > 1});
              }
            }
      }
    }
  return out;
}

// 0.85 of Megatron's weights + grads + optimizer bytes (formula_compare.h):
// the formula assumes bf16 weights with fp32 grads and master copy (18 bytes
// a parameter, 6 + 12/DP with the distributed optimizer); an fp32 model holds
// 16 (no master copy), 8/9 of it; the margin covers rounding in the formula.
// The dry run holds at least that much, so a layout whose bound exceeds the
// device cannot fit (tests compare with the exhaustive search). Without a
// known vocabulary (the dry run reads it from the tokenizer) one token stands
// in: the embedding's share of the bound only shrinks.
static bool hopeless(config::Args a, int64_t capacity) {
  if (!a.vocab_size) a.vocab_size = 1;
  return 0.85 * megatron_formulas(a).states > static_cast<double>(capacity);
}

static PlanResult measure(const config::Args& a, const Layout& l) {
  const DryRun r = dry_run(a);
  const StepTime t = step_time(r);
  PlanResult p;
  p.layout = l;
  p.dp = a.data_parallel_size;
  for (const ClassMemory& c : r.classes) p.peak_bytes = std::max(p.peak_bytes, class_peak(c));
  p.capacity_bytes = r.profile.hbm_bytes;
  p.step_s = t.step_s;
  p.tokens_per_s_per_device = t.tokens_per_s_per_device;
  p.mfu = t.mfu;
  p.fits = plan_fits(r);
  p.flags = layout_flags(l, a.num_layers);
  return p;
}

SearchSummary search_layouts(const config::Args& base, const SearchOptions& o) {
  const int world = o.nnodes * o.nproc_per_node;
  SearchSummary s;
  int64_t capacity = -1;
  for (const Layout& l : enumerate(base, o)) {
    ++s.candidates;
    config::Args a = apply_layout(base, l);
    try {
      config::validate(a, world);
    } catch (const ConfigError&) {
      ++s.invalid;  // Megatron would refuse it too
      continue;
    }
    if (o.prune && capacity >= 0 && hopeless(a, capacity)) {
      ++s.pruned;
      continue;
    }
    ++s.dry_run;
    PlanResult p = measure(a, l);
    capacity = p.capacity_bytes;
    (p.fits ? s.fitting : s.misses).push_back(std::move(p));
  }
  std::stable_sort(s.fitting.begin(), s.fitting.end(), [](const PlanResult& x, const PlanResult& y) {
    if (x.tokens_per_s_per_device != y.tokens_per_s_per_device)
      return x.tokens_per_s_per_device > y.tokens_per_s_per_device;
    return x.peak_bytes < y.peak_bytes;
  });
  std::stable_sort(s.misses.begin(), s.misses.end(),
                   [](const PlanResult& x, const PlanResult& y) { return x.peak_bytes < y.peak_bytes; });
  return s;
}

}  // namespace mtrain::plan
