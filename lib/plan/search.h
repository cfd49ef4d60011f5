// `mtrain plan`: the layout search. Every combination of TP, PP, VPP, CP
// (with both algorithms, for long sequences: SearchOptions), DP, expert
// parallelism (EP, ETP, dispatcher: MoE models), micro-batch, recompute,
// distributed optimizer and sequence parallelism for
// a world (with --overlap_grad_reduce whenever DP > 1, and
// --overlap_param_gather with the distributed optimizer) is checked by the
// CLI's own validation (config::validate), pruned
// when a lower bound of its parameter states already exceeds the device, and
// otherwise dry-run (dry_run.h) for its exact memory and simulated step time.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/progress.h"
#include "config/args.h"
#include "data/data_pipeline.h"

namespace mtrain::plan {

struct Layout {
  int tp = 1, pp = 1, vpp = 1, mbs = 1;
  std::string recompute = "none";  // none | selective | full
  bool distopt = false, sp = false;
  // An uneven pipeline: layers on the first / last stage (0: the even share),
  // Megatron's --decoder_first/last_pipeline_num_layers.
  int first_stage_layers = 0, last_stage_layers = 0;
  // Context parallelism: CP ranks per sequence and MindSpeed's algorithm
  // (megatron_cp_algo: ring; ulysses_cp_algo: all-to-all over heads).
  int cp = 1;
  std::string cp_algo = "megatron_cp_algo";
  // An MoE model's expert layout (moe false: a dense model, no expert flags).
  bool moe = false;
  int ep = 1, etp = 1;
  std::string dispatcher = "alltoall";
  // Not searched: on whenever they apply, as Megatron users run (DP > 1;
  // the parameter gather with the distributed optimizer).
  bool overlap_grad_reduce = false, overlap_param_gather = false;
};

// The ways to split num_layers over pp stages that the search tries: the even
// split when num_layers % pp == 0 ({0, 0}), and first / last stages with one or
// two layers fewer than the middle ones (which hold an equal share), so the
// embedding and the LM head + loss need not make their stage the bottleneck.
std::vector<std::pair<int, int>> stage_splits(int num_layers, int pp);

// One flag of a layout as the command line spells it: canonical name
// (underscores, no dashes) and value ("" for a bare boolean flag).
struct LayoutFlag {
  std::string name, value;
};
// The flags that select `l` on the command line, in print order: the one
// encoding of a layout. Settings that are off and at their default (the even
// split, CP 1, no overlap, ...) are left out.
std::vector<LayoutFlag> layout_flag_list(const Layout& l, int num_layers);
// layout_flag_list as the plan prints it: "--tensor_model_parallel_size 2 ...".
std::string layout_flags(const Layout& l, int num_layers);
// `base` with `l` applied (not validated): the searched settings the flags
// leave out reset to their defaults, then layout_flag_list(l, base.num_layers)
// applied through the flag table as the command line applies it.
config::Args apply_layout(const config::Args& base, const Layout& l);

struct PlanResult {
  Layout layout;
  int dp = 1, num_layers = 0;
  int64_t peak_bytes = 0, capacity_bytes = 0;  // the worst rank class: its peak on the device, and the HBM
  int64_t usable_bytes = 0;                    // the capacity less the memory margin: what a fitting peak stays within
  double step_s = 0, tokens_per_s_per_device = 0, mfu = 0;
  // The micro-batch phases' blocking communication of the slowest-communicating stage, split as the
  // dry run's report splits it (step_time.h): TP (and SP), CP, EP (expert dispatch).
  double tp_comm_s = 0, cp_comm_s = 0, ep_comm_s = 0;
  bool fits = false;
  // The most any rank class holds in weights, gradients and optimizer state: allocated before the step
  // and held through it, the same under any micro-batch, recompute and SP.
  int64_t states_bytes = 0;
  // The most any rank class holds in those states and its activation slots together (both held through
  // the step: the peak is at least this).
  int64_t resident_bytes = 0;
  // A miss whose dry run stopped once those exceeded the usable HBM (not stepped): peak_bytes is a lower
  // bound and there is no step time. Measured whole when nothing fits (its peak is then printed).
  bool peak_is_bound = false;
  std::string flags;
};

struct SearchOptions {
  int nproc_per_node = 1, nnodes = 1;
  bool prune = true;                 // false: dry-run every valid candidate (tests compare)
  ProgressSink* progress = nullptr;  // a progress line over the candidates (common/progress.h)
  // CP > 1 is tried when it leaves every CP rank at least this many tokens of
  // each sequence (so only for sequences of 2x this and longer). Below, the
  // activations CP divides are small beside the states it does not divide,
  // while each CP size adds a full set of candidates per algorithm.
  int min_cp_tokens = 4096;
  // A layout fits when its peak on the device leaves this share of the
  // capacity free (`mtrain plan --memory_margin`; the profile's default).
  double memory_margin = 0;
  // An sft job's data, read once: each candidate's step runs the shapes of
  // its first global batch (dry_run.h); null: rows of --max_length.
  data::DataPipeline* data = nullptr;
  // Dry runs at once (0: one per core). The result is the same for any count.
  int threads = 0;
};

struct SearchSummary {
  int candidates = 0, invalid = 0, pruned = 0, dry_run = 0;
  // Not dry-run: a miss of the same split rules it out (search.cc, cannot_fit).
  int pruned_after_miss = 0;
  // Fitting layouts with the memory and step time of a simpler one that differs
  // in one setting (e.g. selective recompute with flash attention keeps and
  // recomputes nothing more): listed once, as the simpler layout.
  int same_as_simpler = 0;
  bool cp_searched = false, moe = false;  // CP > 1 was among the candidates; the model is an MoE model
  std::vector<PlanResult> fitting;        // best first: tokens/s/device, then less memory
  std::vector<PlanResult> misses;         // dry-run, not fitting; smallest shortfall first
};

// Every layout of the loops' cross product that the search's rules allow, in
// the order it tries them; the CLI's validation then rejects what Megatron
// would (heads % TP, ...). base: as for search_layouts.
std::vector<Layout> enumerate_layouts(const config::Args& base, const SearchOptions& o);

// base: validated Args of the user's model and batch (any layout).
SearchSummary search_layouts(const config::Args& base, const SearchOptions& o);

}  // namespace mtrain::plan
