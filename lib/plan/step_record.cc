#include "plan/step_record.h"

#include "profiler/kernel_region.h"

namespace mtrain::plan {

void StepRecorder::on_step_begin(int64_t iteration) {
  recording_ = iteration == iteration_;
  if (recording_) profiler::set_compute_dtype_bytes(dtype_bytes_);
}

void StepRecorder::on_comm(const parallel::CommEvent& e) {
  if (recording_) record_.comms.push_back({e.op, std::string(e.group), e.group_size, e.bytes, e.recv_bytes, phase_});
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
}

void StepRecorder::on_region_end(const profiler::Region& r, std::span<const profiler::TensorRef>) {
  if (recording_ && r.kind == profiler::Kind::kKernel) --open_kernels_;
  if (recording_ && r.kind == profiler::Kind::kPhase) phase_ = -1;
}

}  // namespace mtrain::plan
