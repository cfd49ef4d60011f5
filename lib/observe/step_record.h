// What one training iteration of one rank executes, as the simulated NPU's
// cost model sees it: every kernel region (name, FLOPs, bytes) and every
// collective / point-to-point transfer (op, group, bytes), in order; a
// kernel inside another kernel counts as part of it. A hook,
// so a real run (through train::RunContext::hooks) and a dry run's
// shape-only step record through the same seam and can be compared op by op.
// record_cost prices a record on the simulated NPU (device/cost_model.h): the
// dry run's step time (lib/plan/step_time.h) and --log_throughput's simulated
// device time of a real run both come from it.
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
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "device/cost_model.h"
#include "observe/hooks.h"

namespace mtrain::observe {

// A phase of the step (probe.h Kind::kPhase): forward_step / backward_step of
// one micro-batch through one model chunk, grad_sync, optimizer_step.
struct PhaseRecord {
  std::string name;
  int microbatch = -1, chunk = 0;
  // Its work: the kernels, collectives and CP ring waits recorded from its
  // begin up to the next phase's, [first, end) of each list.
  int64_t first_kernel = 0, first_comm = 0, first_ring_wait = 0;
  int64_t end_kernel = 0, end_comm = 0, end_ring_wait = 0;
  bool operator==(const PhaseRecord&) const = default;
};

struct KernelRecord {
  // The region's name: kernel regions are named by string literals
  // (profiler/probe.h), so a record never outlives its names.
  std::string_view name;
  KernelWork work;  // flops, bytes and the shape the cost model prices
  int phase = -1;   // index into StepRecord::phases
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
  // CP ring forward steps that need the block the previous pass brought
  // (parallel::kRingBlockNeeded): the kernels recorded before each.
  std::vector<int64_t> ring_waits;
  // A dry run's steady state stepped once for its repeats (plan/steady_state.h):
  // `phases` lists every phase of the step, the other lists only what was
  // stepped; phase i repeats the work of phase copy_of[i] (-1: its own), and
  // the entries of a repeated phase name the phase they were recorded in.
  // Empty: every phase has its own work. step_order() reads either in step
  // order; expanded() writes the copies out.
  std::vector<int> copy_of;
};

// The step's kernels, collectives and ring waits in the order they ran, a
// repeated phase's work read again where it repeats: entry i of the step is
// record.kernels[kernel[i]] in phase kernel_phase[i] (-1: between phases),
// and so on; kernels_before and ring waits count the step's kernels.
struct StepOrder {
  std::vector<int32_t> kernel, kernel_phase;
  std::vector<int32_t> comm, comm_phase;
  std::vector<int64_t> comm_kernels_before;
  std::vector<int64_t> ring_waits;
};
StepOrder step_order(const StepRecord& r);
// The record with every phase's work written out (copy_of empty): what
// stepping every micro-batch records.
StepRecord expanded(const StepRecord& r);

// Records the iterations `records` selects (1-based), each replacing the
// last; iterations it does not select open no region for it, so they cost
// nothing. Kernel bytes are counted at `dtype_bytes` per element (the model's
// compute dtype), as the profiler does.
class StepRecorder : public TrainHook {
 public:
  // Iteration `iteration` only.
  StepRecorder(int64_t iteration, int dtype_bytes)
      : StepRecorder([iteration](int64_t it) { return it == iteration; }, dtype_bytes) {}
  StepRecorder(std::function<bool(int64_t)> records, int dtype_bytes)
      : records_(std::move(records)), dtype_bytes_(dtype_bytes) {}

  void on_step_begin(int64_t iteration) override;
  void on_step_end(const StepMetrics&) override;
  void on_comm(const parallel::CommEvent& e) override;
  std::optional<profiler::Kind> region_depth(int64_t iteration) const override;
  void on_region_begin(const profiler::Region& r, std::span<const profiler::TensorRef>) override;
  void on_region_end(const profiler::Region& r, std::span<const profiler::TensorRef>) override;

  const StepRecord& record() const { return record_; }
  // The record, moved out (the recorder is done with it).
  StepRecord take_record() { return std::move(record_); }

 private:
  std::function<bool(int64_t)> records_;
  int dtype_bytes_;
  bool recording_ = false;
  int open_kernels_ = 0;
  int phase_ = -1;
  std::deque<size_t> pending_;  // overlapped collectives started, not yet reported (indices into comms)
  StepRecord record_;
};

// A forward_step / backward_step phase: one micro-batch through one model chunk.
bool is_microbatch_phase(const PhaseRecord& p);

// A non-blocking DP bucket collective and where it starts.
struct OverlappedComm {
  int phase = -1;             // StepRecord::phases index it started in
  double offset_s = 0;        // into that phase: its kernels and collectives before the start
  double duration_s = 0;      // cost model
  bool param_gather = false;  // an all-gather started after the optimizer step (else a gradient reduction)
  bool operator==(const OverlappedComm&) const = default;
};

// Which report line a collective inside a micro-batch phase belongs to, by
// its communicator group (parallel/process_grid.h names): the CP group's
// ring passes and Ulysses all-to-alls; the expert grid's groups ("ep",
// "expt-tp", "tp-ep", "tp-ep-pp": the MoE token dispatch); the rest (the TP
// group: TP/SP collectives, the router's sums over the token shards, and
// the ETP = TP experts' row gather / reduce-scatter, which run on it).
enum class CommLine { kTensor, kContext, kExpert };
CommLine comm_line(std::string_view group);

// Which collectives of a micro-batch phase run beside its kernels rather
// than between them (the record is the same; only the device timeline
// changes):
// - the CP ring's K/V passes (parallel/ring_attention.cc, always: Megatron's
//   ring sends the next block while the current one is computed): a pass
//   runs on the communication stream from where it is issued; the next pass
//   (or the phase's end) first waits for it;
// - tp_comm_overlap (Megatron's --tp_comm_overlap, MindSpeed's
//   --use_ascend_mc2; both need sequence parallelism): a TP all-gather
//   right before a GEMM, or a reduce-scatter right after one, is split into
//   TP-size chunks pipelined with the GEMM: max(comm, gemm) + min(comm,
//   gemm) / TP instead of comm + gemm; beside a reduce-scatter the GEMM runs
//   `rs_gemm_slowdown` times slower (the units its communication takes:
//   of_profile).
struct PhaseOverlap {
  bool tp_comm_overlap = false;
  double rs_gemm_slowdown = 1.0;
  // compute_units / (compute_units - tp_overlap_units) of the profile.
  static PhaseOverlap of_profile(const device::DeviceProfile& p, bool tp_comm_overlap);
};

// The cost model applied to one rank's step record.
struct RecordCost {
  double compute_s = 0;                // the kernels of the micro-batch phases
  double optimizer_s = 0;              // the kernels outside them: unscale/check, grad norm, update, param copy
  double param_gather_s = 0;           // the blocking param all-gather in tail_comm_s (distributed optimizer)
  double phase_comm_s = 0;             // collectives inside the micro-batch phases: the time they add to them
  double phase_line_s[3] = {0, 0, 0};  // phase_comm_s by CommLine (TP, CP, EP)
  double phase_hidden_s = 0;           // the collectives' time inside the phases that ran beside kernels
  // The compute stream idle inside the phases because the host had not yet
  // issued the next kernel (host_dispatch_s per op: a host-bound step).
  double host_wait_s = 0;
  double tail_comm_s = 0;       // blocking collectives outside them, pipeline messages excepted
  double p2p_message_s = 0;     // the longest pipeline message
  double dp_comm_s = 0;         // DP bucket collectives (gradient reduction, parameter gather), blocking or not
  double dp_blocking_s = 0;     // the blocking ones (part of tail_comm_s)
  std::vector<double> phase_s;  // per StepRecord::phases entry: its kernels + the time its collectives add
  std::vector<OverlappedComm> overlapped;  // in start order
  // This rank's device busy for the step: its kernels (the optimizer's too)
  // and its blocking collectives back to back. Pipeline messages, the wait for other stages
  // (the bubble) and overlapped DP collectives (on their own stream) are not
  // in it; with one stage and no overlap it is the dry run's step time.
  double busy_s() const { return compute_s + host_wait_s + optimizer_s + phase_comm_s + tail_comm_s; }
  bool operator==(const RecordCost&) const = default;
};
// The bytes a collective's time is priced on: CommEvent's payload, except a
// send_recv (the ring's shift), which sends and receives at once over
// full-duplex links: the larger of the two.
double priced_bytes(const CommRecord& m);
// nodes(group name): how many nodes that group of the rank spans.
RecordCost record_cost(const StepRecord& r, const device::CostModel& cost, bool sixteen_bit,
                       const std::function<int(std::string_view)>& nodes, const PhaseOverlap& overlap = {});

}  // namespace mtrain::observe
