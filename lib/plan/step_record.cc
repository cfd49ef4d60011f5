#include "plan/step_record.h"

#include <string_view>

#include "parallel/grad_buckets.h"
#include "profiler/kernel_region.h"

namespace mtrain::plan {

void StepRecorder::on_step_begin(int64_t iteration) {
  recording_ = iteration == iteration_;
  if (recording_) profiler::set_compute_dtype_bytes(dtype_bytes_);
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
  if (iteration != iteration_) return std::nullopt;
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

}  // namespace mtrain::plan
