// mtrain plan's candidates (search.h): the layouts of the loops' cross
// product, their command-line flags, and a base job with a layout applied.
#include <fmt/format.h>

#include <optional>
#include <set>
#include <stdexcept>
#include <variant>

#include "config/flags.h"
#include "plan/search.h"

namespace mtrain::plan {

std::vector<LayoutFlag> layout_flag_list(const Layout& l, int num_layers) {
  std::vector<LayoutFlag> f = {{"tensor_model_parallel_size", std::to_string(l.tp)},
                               {"pipeline_model_parallel_size", std::to_string(l.pp)}};
  if (l.first_stage_layers) f.push_back({"decoder_first_pipeline_num_layers", std::to_string(l.first_stage_layers)});
  if (l.last_stage_layers) f.push_back({"decoder_last_pipeline_num_layers", std::to_string(l.last_stage_layers)});
  if (l.vpp > 1) f.push_back({"num_layers_per_virtual_pipeline_stage", std::to_string(num_layers / (l.pp * l.vpp))});
  if (l.cp > 1) {
    f.push_back({"context_parallel_size", std::to_string(l.cp)});
    f.push_back({"context_parallel_algo", l.cp_algo});
  }
  if (l.moe) {
    f.push_back({"expert_model_parallel_size", std::to_string(l.ep)});
    f.push_back({"expert_tensor_parallel_size", std::to_string(l.etp)});
    f.push_back({"moe_token_dispatcher_type", l.dispatcher});
  }
  f.push_back({"micro_batch_size", std::to_string(l.mbs)});
  f.push_back({"recompute_granularity", l.recompute});
  if (l.recompute == "full") {
    f.push_back({"recompute_method", "uniform"});
    f.push_back({"recompute_num_layers", "1"});
  }
  f.push_back({"use_distributed_optimizer", l.distopt ? "true" : "false"});
  f.push_back({"sequence_parallel", l.sp ? "true" : "false"});
  if (l.overlap_grad_reduce) f.push_back({"overlap_grad_reduce", ""});
  if (l.overlap_param_gather) f.push_back({"overlap_param_gather", ""});
  return f;
}

std::string layout_flags(const Layout& l, int num_layers) {
  std::string out;
  for (const LayoutFlag& f : layout_flag_list(l, num_layers)) {
    out += fmt::format("{}--{}", out.empty() ? "" : " ", f.name);
    if (!f.value.empty()) out += " " + f.value;
  }
  return out;
}

// The searched settings a layout's flags leave out when they are off (the even
// split, no VPP, CP 1, recompute without a method, no overlap): a layout means
// their defaults.
static constexpr const char* kUnsaidWhenOff[] = {"decoder_first_pipeline_num_layers",
                                                 "decoder_last_pipeline_num_layers",
                                                 "virtual_pipeline_model_parallel_size",
                                                 "num_layers_per_virtual_pipeline_stage",
                                                 "context_parallel_size",
                                                 "context_parallel_algo",
                                                 "recompute_method",
                                                 "recompute_num_layers",
                                                 "overlap_grad_reduce",
                                                 "overlap_param_gather"};

static const config::FlagSpec& layout_flag_spec(const std::string& name) {
  const std::optional<config::FlagMatch> m = config::find_flag(name);
  if (!m) throw std::logic_error("plan: no flag --" + name);
  return *m->spec;
}

config::Args apply_layout(const config::Args& base, const Layout& l) {
  config::Args a = base;
  static const config::Args defaults;
  for (const char* name : kUnsaidWhenOff)
    std::visit([&](auto field) { a.*field = defaults.*field; }, layout_flag_spec(name).field);
  // The printed flags, applied as the command line applies them.
  for (const LayoutFlag& f : layout_flag_list(l, base.num_layers)) {
    config::RawValue v;
    if (f.value.empty())
      v.bare = true;
    else
      v.items = {f.value};
    const std::string error = config::apply_flag(layout_flag_spec(f.name), false, v, a);
    if (!error.empty()) throw std::logic_error(fmt::format("plan: --{} {}: {}", f.name, f.value, error));
  }
  return a;
}

static std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

std::vector<std::pair<int, int>> stage_splits(int num_layers, int pp) {
  std::vector<std::pair<int, int>> out;
  if (num_layers % pp == 0) out.push_back({0, 0});
  if (pp == 1) return out;
  // (first, last) layers: at PP 2 there is no middle stage, and two ways can
  // name one split (48 = 24 + 24 is the even split with one or two fewer on both sides).
  std::set<std::pair<int, int>> seen;
  if (num_layers % pp == 0) seen.insert({num_layers / pp, num_layers / pp});
  // fewer_first / fewer_last: layers the first / last stage holds below the middle stages' share.
  for (int fewer_first : {0, 1, 2})
    for (int fewer_last : {0, 1, 2}) {
      const int share = (num_layers + fewer_first + fewer_last) / pp;
      if ((fewer_first == 0 && fewer_last == 0) || (num_layers + fewer_first + fewer_last) % pp != 0) continue;
      if (share - fewer_first < 1 || share - fewer_last < 1) continue;
      if (!seen.insert({share - fewer_first, share - fewer_last}).second) continue;
      out.push_back({fewer_first ? share - fewer_first : 0, fewer_last ? share - fewer_last : 0});
    }
  return out;
}

// The settings that do not change the model's split: micro-batch, recompute,
// distributed optimizer, sequence parallelism.
static void add_settings(Layout l, int dp, int global_batch, std::vector<Layout>& out) {
  for (int mbs : divisors(global_batch / dp))
    for (const char* rc : {"none", "selective", "full"})
      for (bool distopt : {false, true}) {
        if (distopt && dp == 1) continue;
        for (bool sp : {false, true}) {
          if (sp && l.tp == 1) continue;
          l.mbs = mbs;
          l.recompute = rc;
          l.distopt = distopt;
          l.sp = sp;
          l.overlap_grad_reduce = dp > 1;
          l.overlap_param_gather = distopt && dp > 1;
          out.push_back(l);
        }
      }
}

// The pipeline splits of `l`'s model over pp stages (even with its VPP
// choices, uneven first / last stages), each with the other settings.
static void add_pipelines(Layout l, int num_layers, int dp, int global_batch, std::vector<Layout>& out) {
  for (const auto& [first, last] : stage_splits(num_layers, l.pp)) {
    const bool even = first == 0 && last == 0;
    for (int vpp : even ? divisors(num_layers / l.pp) : std::vector<int>{1}) {
      if (vpp > 1 && l.pp == 1) continue;
      l.vpp = vpp, l.first_stage_layers = first, l.last_stage_layers = last;
      add_settings(l, dp, global_batch, out);
    }
  }
}

// (CP, algorithm) for the ranks left after TP x PP: CP 1, and each CP size
// dividing them that leaves every CP rank min_cp_tokens of a sequence, with
// both of MindSpeed's algorithms (the validation refuses what they cannot split).
static std::vector<std::pair<int, std::string>> context_splits(int ranks, int seq_length, int min_cp_tokens) {
  std::vector<std::pair<int, std::string>> out = {{1, "megatron_cp_algo"}};
  for (int cp : divisors(ranks))
    if (cp > 1 && seq_length / cp >= min_cp_tokens)
      for (const char* algo : {"megatron_cp_algo", "ulysses_cp_algo"}) out.push_back({cp, algo});
  return out;
}

// An MoE model's expert layouts for TP and DP: EP dividing both the experts
// and DP (EP ranks are data-parallel ranks of the dense model), ETP 1 or TP,
// and the dispatcher: allgather only where it differs from alltoall (with
// EP = ETP = 1 both are the same local permutation). The validation refuses
// what mtrain does not run (e.g. allgather or ETP > 1 under EP, today).
static std::vector<Layout> expert_layouts(Layout l, const config::Args& base, int dp) {
  if (!base.num_experts) return {l};
  std::vector<Layout> out;
  l.moe = true;
  for (int ep : divisors(dp)) {
    if (*base.num_experts % ep != 0) continue;
    for (int etp : l.tp == 1 ? std::vector<int>{1} : std::vector<int>{1, l.tp})
      for (const char* dispatcher : {"alltoall", "allgather"}) {
        if (std::string(dispatcher) == "allgather" && ep * etp == 1) continue;
        l.ep = ep, l.etp = etp, l.dispatcher = dispatcher;
        out.push_back(l);
      }
  }
  return out;
}

std::vector<Layout> enumerate_layouts(const config::Args& base, const SearchOptions& o) {
  const int world = o.nnodes * o.nproc_per_node;
  std::vector<Layout> out;
  for (int tp : divisors(o.nproc_per_node))
    for (int pp : divisors(world / tp))
      for (const auto& [cp, algo] : context_splits(world / (tp * pp), *base.seq_length, o.min_cp_tokens)) {
        const int dp = world / (tp * pp * cp);
        if (base.global_batch_size % dp != 0) continue;
        Layout l;
        l.tp = tp, l.pp = pp, l.cp = cp, l.cp_algo = algo;
        for (const Layout& e : expert_layouts(l, base, dp))
          add_pipelines(e, base.num_layers, dp, base.global_batch_size, out);
      }
  return out;
}

}  // namespace mtrain::plan
