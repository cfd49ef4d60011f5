#include "train/step_record.h"

#include <algorithm>

#include "profiler/kernel_region.h"

namespace mtrain::train {

void StepRecorder::on_step_begin(int64_t iteration) {
  recording_ = records_(iteration);
  if (!recording_) return;
  record_ = {};
  profiler::set_compute_dtype_bytes(dtype_bytes_);
}

void StepRecorder::on_comm(const parallel::CommEvent& e) {
  if (recording_) record_.comms.push_back({e.op, std::string(e.group), e.group_size, e.bytes, e.recv_bytes, phase_});
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
}

void StepRecorder::on_region_end(const profiler::Region& r, std::span<const profiler::TensorRef>) {
  if (recording_ && r.kind == profiler::Kind::kKernel) --open_kernels_;
  if (recording_ && r.kind == profiler::Kind::kPhase) phase_ = -1;
}

bool is_microbatch_phase(const PhaseRecord& p) { return p.name == "forward_step" || p.name == "backward_step"; }

RecordCost record_cost(const StepRecord& r, const device::CostModel& cost, bool sixteen_bit,
                       const std::function<bool(std::string_view)>& inter_node) {
  RecordCost c;
  c.phase_s.assign(r.phases.size(), 0.0);
  for (const KernelRecord& k : r.kernels) {
    const double t = cost.kernel_seconds(k.flops, k.bytes, sixteen_bit);
    c.compute_s += t;
    if (k.phase >= 0) c.phase_s[k.phase] += t;
  }
  for (const CommRecord& m : r.comms) {
    const double t = cost.comm_seconds(parallel::cost_collective(m.op), static_cast<double>(m.bytes + m.recv_bytes),
                                       m.group_size, inter_node(m.group));
    if (m.group == "pp") {
      c.p2p_message_s = std::max(c.p2p_message_s, t);
    } else if (m.phase >= 0 && is_microbatch_phase(r.phases[m.phase])) {
      c.phase_comm_s += t;
      c.phase_s[m.phase] += t;
    } else {
      c.tail_comm_s += t;
    }
  }
  return c;
}

}  // namespace mtrain::train
