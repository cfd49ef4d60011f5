// What one training iteration of one rank executes, as the simulated NPU's
// cost model sees it: every kernel region (name, FLOPs, bytes) and every
// collective / point-to-point transfer (op, group, bytes), in order; a
// kernel inside another kernel counts as part of it. A hook,
// so a real run (through train::RunContext::hooks) and a dry run's
// shape-only step record through the same seam and can be compared op by op.
//
// A non-blocking DP bucket collective (--overlap_grad_reduce,
// --overlap_param_gather) is recorded where it STARTS (the region that
// marks it, parallel/grad_buckets.h), with how many kernels ran before it,
// and its op and bytes are filled in when it completes (they complete in
// start order), even after the recorded iteration (a parameter gather
// completes in the next forward).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "train/hooks.h"

namespace mtrain::plan {

// A phase of the step (probe.h Kind::kPhase): forward_step / backward_step of
// one micro-batch through one model chunk, grad_sync, optimizer_step.
struct PhaseRecord {
  std::string name;
  int microbatch = -1, chunk = 0;
  bool operator==(const PhaseRecord&) const = default;
};

struct KernelRecord {
  std::string name;
  double flops = 0, bytes = 0;
  int phase = -1;  // index into StepRecord::phases
  bool operator==(const KernelRecord&) const = default;
};

struct CommRecord {
  parallel::CommOp op = parallel::CommOp::kBarrier;
  std::string group;
  int group_size = 1;
  int64_t bytes = 0, recv_bytes = 0;
  int phase = -1;              // index into StepRecord::phases; -1: between phases (pipeline p2p, loss sums)
  int64_t kernels_before = 0;  // kernels recorded before it started (its place in the phase)
  bool overlapped = false;     // a non-blocking DP bucket collective, recorded at its start
  bool operator==(const CommRecord&) const = default;
};

struct StepRecord {
  std::vector<PhaseRecord> phases;
  std::vector<KernelRecord> kernels;
  std::vector<CommRecord> comms;
  // --overlap_param_gather, filled by a dry run: per model chunk of the rank,
  // how many of the overlapped parameter all-gathers (in start order) its
  // first forward waits for (parallel::param_gather_prefix).
  std::vector<int> gathers_before_chunk;
};

// Records iteration `iteration` (1-based) only. Kernel bytes are counted at
// `dtype_bytes` per element (the model's compute dtype), as the profiler does.
class StepRecorder : public train::TrainHook {
 public:
  StepRecorder(int64_t iteration, int dtype_bytes) : iteration_(iteration), dtype_bytes_(dtype_bytes) {}

  void on_step_begin(int64_t iteration) override;
  void on_step_end(const train::StepMetrics&) override { recording_ = false; }
  void on_comm(const parallel::CommEvent& e) override;
  std::optional<profiler::Kind> region_depth(int64_t iteration) const override;
  void on_region_begin(const profiler::Region& r, std::span<const profiler::TensorRef>) override;
  void on_region_end(const profiler::Region& r, std::span<const profiler::TensorRef>) override;

  const StepRecord& record() const { return record_; }

 private:
  int64_t iteration_;
  int dtype_bytes_;
  bool recording_ = false;
  int open_kernels_ = 0;
  int phase_ = -1;
  std::deque<size_t> pending_;  // overlapped collectives started, not yet reported (indices into comms)
  StepRecord record_;
};

}  // namespace mtrain::plan
