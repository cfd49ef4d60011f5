#include "observe/step_record.h"

#include <algorithm>
#include <string_view>

#include "parallel/grad_buckets.h"
#include "profiler/kernel_region.h"

namespace mtrain::observe {

void StepRecorder::on_step_begin(int64_t iteration) {
  recording_ = records_(iteration);
  if (!recording_) return;
  record_ = {};
  pending_.clear();  // the previous record's gathers still completing are not this one's
  profiler::set_compute_dtype_bytes(dtype_bytes_);
}

void StepRecorder::on_comm(const parallel::CommEvent& e) {
  const bool collective = e.op == parallel::CommOp::kAllReduce || e.op == parallel::CommOp::kReduceScatter ||
                          e.op == parallel::CommOp::kAllGather;
  if (e.nonblocking && collective) {
    // Recorded at its start; one started before the recorded iteration is not this step's.
    if (pending_.empty()) return;
    CommRecord& c = record_.comms[pending_.front()];
    pending_.pop_front();
    c.op = e.op;
    c.group = std::string(e.group);
    c.group_size = e.group_size;
    c.bytes = e.bytes;
    c.recv_bytes = e.recv_bytes;
    return;
  }
  if (recording_)
    record_.comms.push_back({e.op, std::string(e.group), e.group_size, e.bytes, e.recv_bytes, phase_,
                             static_cast<int64_t>(record_.kernels.size())});
}

std::optional<profiler::Kind> StepRecorder::region_depth(int64_t iteration) const {
  if (!records_(iteration)) return std::nullopt;
  return profiler::Kind::kKernel;
}

// Only outermost kernels: a kernel called inside another is part of its
// work on the device (as the profiler's timeline counts it), and a dry run's
// kernel returns before calling it.
void StepRecorder::on_region_begin(const profiler::Region& r, std::span<const profiler::TensorRef>) {
  if (!recording_) return;
  if (r.kind == profiler::Kind::kPhase) {
    phase_ = static_cast<int>(record_.phases.size());
    record_.phases.push_back({r.name, static_cast<int>(r.index), r.chunk});
  }
  if (r.kind == profiler::Kind::kKernel && open_kernels_++ == 0)
    record_.kernels.push_back({r.name, r.flops, r.bytes, phase_});
  const std::string_view name = r.name;
  if (r.kind == profiler::Kind::kOp && (name == parallel::kStartGradReduce || name == parallel::kStartParamGather)) {
    CommRecord c;  // op and bytes follow when it completes
    c.phase = phase_;
    c.kernels_before = static_cast<int64_t>(record_.kernels.size());
    c.overlapped = true;
    pending_.push_back(record_.comms.size());
    record_.comms.push_back(std::move(c));
  }
}

void StepRecorder::on_region_end(const profiler::Region& r, std::span<const profiler::TensorRef>) {
  if (recording_ && r.kind == profiler::Kind::kKernel) --open_kernels_;
  if (recording_ && r.kind == profiler::Kind::kPhase) phase_ = -1;
}

bool is_microbatch_phase(const PhaseRecord& p) { return p.name == "forward_step" || p.name == "backward_step"; }

namespace {

// A blocking DP bucket collective: the gradient reduction (grad_sync) or the
// distributed optimizer's parameter gather (optimizer_step), over any
// gradient region's group (grad_regions.h).
bool is_dp_bucket_comm(const StepRecord& r, const CommRecord& m) {
  const bool dp_group = m.group == "dp" || m.group == "dp-cp" || m.group == "expt-dp";
  return dp_group && m.phase >= 0 &&
         (r.phases[m.phase].name == "grad_sync" || r.phases[m.phase].name == "optimizer_step");
}

}  // namespace

RecordCost record_cost(const StepRecord& r, const device::CostModel& cost, bool sixteen_bit,
                       const std::function<bool(std::string_view)>& inter_node) {
  RecordCost c;
  c.phase_s.assign(r.phases.size(), 0.0);
  // kernel_sum[i]: the kernels before kernel i; first_kernel: per phase (-1: none).
  std::vector<double> kernel_sum(r.kernels.size() + 1, 0.0);
  std::vector<int64_t> first_kernel(r.phases.size(), -1);
  for (size_t i = 0; i < r.kernels.size(); ++i) {
    const KernelRecord& k = r.kernels[i];
    const double t = cost.kernel_seconds(k.flops, k.bytes, sixteen_bit);
    kernel_sum[i + 1] = kernel_sum[i] + t;
    if (k.phase < 0 || !is_microbatch_phase(r.phases[k.phase])) {
      c.optimizer_s += t;
      continue;
    }
    c.compute_s += t;
    c.phase_s[k.phase] += t;
    if (first_kernel[k.phase] < 0) first_kernel[k.phase] = static_cast<int64_t>(i);
  }
  std::vector<double> phase_comm(r.phases.size(), 0.0);  // blocking collectives so far, per phase
  for (const CommRecord& m : r.comms) {
    const double t = cost.comm_seconds(parallel::cost_collective(m.op), static_cast<double>(m.bytes + m.recv_bytes),
                                       m.group_size, inter_node(m.group));
    if (m.overlapped) {
      OverlappedComm o{m.phase, 0.0, t, m.op == parallel::CommOp::kAllGather};
      if (m.phase >= 0) {
        const int64_t first = first_kernel[m.phase];
        if (first >= 0 && m.kernels_before > first) o.offset_s = kernel_sum[m.kernels_before] - kernel_sum[first];
        o.offset_s += phase_comm[m.phase];
      }
      c.overlapped.push_back(o);
      c.dp_comm_s += t;
    } else if (m.group == "pp") {
      c.p2p_message_s = std::max(c.p2p_message_s, t);
    } else if (m.phase >= 0 && is_microbatch_phase(r.phases[m.phase])) {
      c.phase_comm_s += t;
      c.phase_s[m.phase] += t;
      phase_comm[m.phase] += t;
    } else {
      c.tail_comm_s += t;
      // The distributed optimizer's param all-gather: the optimizer phase's only all-gather.
      if (m.op == parallel::CommOp::kAllGather && m.phase >= 0 && r.phases[m.phase].name == "optimizer_step")
        c.param_gather_s += t;
      if (is_dp_bucket_comm(r, m)) {
        c.dp_comm_s += t;
        c.dp_blocking_s += t;
      }
    }
  }
  return c;
}

}  // namespace mtrain::observe
