// The simulated step time of a dry run: the cost model (device/cost_model.h)
// applied to every kernel and collective a rank class's shape-only step
// recorded (step_record.h), then the pipeline schedule played on the device
// clock of every stage, and Megatron's throughput figures from the result.
//
// Model (what it assumes, so a reader can judge the numbers):
// - A forward_step / backward_step phase lasts its kernels' roofline time plus
//   its collectives (TP/SP all-reduce, all-gather, reduce-scatter: on the
//   critical path, nothing overlapped).
// - A pipeline message costs one point-to-point time between the phase that
//   sends it and the one that needs it (Megatron's 1F1B / interleaved order,
//   parallel::pipeline_actions); a stage waits for it (the bubble).
// - After the last backward: the collectives outside the micro-batch phases
//   (loss and token counts, DP reduce-scatter / all-reduce of the gradients,
//   SP and embedding gradient sums, grad norm, distributed-optimizer
//   all-gather) run one after another, not overlapped with compute
//   (--overlap_grad_reduce / --overlap_param_gather are not modelled).
// - The optimizer's kernels (fp16 unscale-and-check, grad-norm pass, the
//   update, the main->model param copy: lib/optim, memory-bound) run after
//   the DP reduction and before the distributed optimizer's param all-gather,
//   on the critical path; the collectives in between (overflow flag, norm)
//   are counted with the DP/grad communication.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "device/cost_model.h"
#include "model/model_config.h"
#include "plan/step_record.h"

namespace mtrain::plan {

struct DryRun;

// Megatron's FLOPs per iteration for its TFLOP/s log line (estimator-formulas.md §1d):
// 12 B s L h^2 [ (1 + g/a + s/h) (a d / h) + (ffn / h) m + Vp / (2 L h) ], m = 3/2 with SwiGLU.
double megatron_flops_per_iteration(const model::ModelConfig& whole_model, int64_t global_batch, int64_t seq_length);

// The cost model applied to one rank's step record.
struct RecordCost {
  double compute_s = 0;         // the kernels of the micro-batch phases
  double optimizer_s = 0;       // the kernels outside them: unscale/check, grad norm, update, param copy
  double param_gather_s = 0;    // the part of tail_comm_s after the update (distributed optimizer)
  double phase_comm_s = 0;      // collectives inside the micro-batch phases (TP / SP)
  double tail_comm_s = 0;       // collectives outside them, pipeline messages excepted
  double p2p_message_s = 0;     // the longest pipeline message
  std::vector<double> phase_s;  // per StepRecord::phases entry: its kernels + its collectives
  bool operator==(const RecordCost&) const = default;
};
// inter_node(group name): whether that group of the rank spans nodes.
RecordCost record_cost(const StepRecord& r, const device::CostModel& cost, bool sixteen_bit,
                       const std::function<bool(std::string_view)>& inter_node);

struct StageTime {
  int stage = 0;
  double compute_s = 0, tp_comm_s = 0, tail_comm_s = 0, optimizer_s = 0, param_gather_s = 0;
  double busy_s = 0;  // its phases, back to back
  double end_s = 0;   // its last backward ends (pipeline clock)
  double bubble = 0;  // idle share of the step time
};

// One span of the simulated timeline (--profile with --dry_run).
struct TimelineSpan {
  int stage = 0;
  std::string name;  // "forward" / "backward" / "DP/grad communication" / "optimizer step" / "param all-gather"
  int microbatch = -1, chunk = 0;
  double begin_s = 0, end_s = 0;
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
