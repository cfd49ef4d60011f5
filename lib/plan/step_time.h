// The simulated step time of a dry run: the cost model (device/cost_model.h)
// applied to every kernel and collective a rank class's shape-only step
// recorded (observe/step_record.h), then the pipeline schedule played on the device
// clock of every stage, and Megatron's throughput figures from the result.
//
// Model (what it assumes, so a reader can judge the numbers):
// - A forward_step / backward_step phase lasts its kernels' time (the cost
//   model's shape model: GEMM tiles and waves, flash attention's blocks,
//   memory-bound passes) plus what its collectives add (observe::record_cost:
//   TP/SP collectives and the EP / CP all-to-alls on the critical path; the
//   CP ring's K/V passes beside the block kernels; with --tp_comm_overlap /
//   --use_ascend_mc2 the SP all-gather / reduce-scatter pipelined with
//   the GEMM beside it).
// - A pipeline message costs one point-to-point time between the phase that
//   sends it and the one that needs it (Megatron's 1F1B / interleaved order,
//   parallel::pipeline_actions); a stage waits for it (the bubble).
// - After the last backward: the blocking collectives outside the micro-batch
//   phases (loss and token counts, DP reduce-scatter / all-reduce of the
//   gradients, SP and embedding gradient sums, grad norm, distributed-
//   optimizer all-gather) run one after another on the compute stream.
// - --overlap_grad_reduce: each DP bucket's reduction starts where the step
//   record places its start (when backward finished the bucket's last
//   gradient: the phase's begin on the pipeline clock plus the kernels and
//   collectives of that phase before it) on a communication stream of its
//   own, one bucket after another; buckets started only after backward
//   start at its end. Exposed is only what runs past the stage's last
//   backward: max(0, comm_end - backward_end), added after the blocking tail.
//   Two streams share no bandwidth or compute here (an upper bound on overlap).
// - --overlap_param_gather: the parameter all-gathers of the previous
//   optimizer step (16-bit parameters) run back to back on the communication
//   stream from the start of the step (all stages end the previous step
//   together, after the world's grad-norm sum); the first forward of each
//   model chunk of a stage reads its buckets in order and, as Megatron's
//   forward pre-hooks, waits per bucket: it runs in as many equal parts,
//   each once its bucket has arrived. Exposed is the delay this adds to the
//   stage's last backward (the pipeline played with and without).
// - Contention: while the overlapped DP collectives run beside the
//   kernels (their hidden time), the kernels run on compute_units -
//   dp_comm_units units, (units / (units - dp_comm_units) - 1) x hidden
//   longer; the stage ends that much later (the other stages' waits for it
//   are not replayed: a first-order estimate).
// - The optimizer's kernels (fp16 unscale-and-check, grad-norm pass, the
//   update, the main->model param copy: lib/optim, memory-bound) run after
//   the blocking DP reduction and before the distributed optimizer's
//   blocking param all-gather, on the critical path; the collectives in
//   between (overflow flag, norm) are counted with the communication after
//   backward.
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "device/cost_model.h"
#include "model/model_config.h"
#include "plan/dry_step.h"

namespace mtrain::plan {

struct DryRun;

using observe::comm_line;
using observe::CommLine;

struct StageTime {
  int stage = 0;
  double compute_s = 0, tail_comm_s = 0;  // tail: blocking, after the last backward
  double host_wait_s = 0;  // the device idle inside the phases, waiting for the host to issue (host-bound)
  // The compute slowed by the overlapped DP collectives beside it (the
  // profile's dp_comm_units taken from the kernels while they run).
  double contention_s = 0;
  // The blocking collectives inside the micro-batch phases, by CommLine (all
  // on the critical path): TP (and SP), CP, EP (expert dispatch).
  double tp_comm_s = 0, cp_comm_s = 0, ep_comm_s = 0;
  double phase_hidden_s = 0;  // their time that ran beside the kernels (CP ring passes, --tp_comm_overlap)
  double optimizer_s = 0;     // the optimizer's kernels (after the blocking DP reduction)
  double param_gather_s = 0;  // the blocking param all-gather (part of tail_comm_s)
  double dp_comm_s = 0;       // DP gradient reduction + parameter gather, all of it
  double dp_exposed_s = 0;    // the part on the critical path (all of it when not overlapped)
  double overlapped_s = 0;    // the part run on the communication stream
  double busy_s = 0;          // its phases, back to back
  double end_s = 0;           // its last backward ends (pipeline clock)
  double bubble = 0;          // idle share of the step time
  // The blocking collectives after the last backward that are not DP's
  // (loss and token counts, SP and embedding gradient sums, grad norm).
  double other_comm_s() const { return std::max(0.0, tail_comm_s - (dp_comm_s - overlapped_s)); }
};

// One span of the simulated timeline (--profile with --dry_run).
struct TimelineSpan {
  int stage = 0;
  std::string
      name;  // "forward", "backward", "communication after backward", "optimizer step", "DP grad reduce bucket", ...
  int microbatch = -1, chunk = 0;
  double begin_s = 0, end_s = 0;
  bool comm_stream = false;  // on the stage's DP communication stream (overlapped)
};

struct StepTime {
  std::vector<StageTime> stages;
  std::vector<TimelineSpan> timeline;
  double step_s = 0;
  double tokens_per_s_per_device = 0;
  double tflops_per_device = 0;  // Megatron's formula over the simulated step time
  double mfu = 0;                // against the profile's peak at the model's dtype
};

StepTime step_time(const DryRun& r);
// The report's step-time section.
std::string time_report(const DryRun& r, const StepTime& t);

}  // namespace mtrain::plan
