#include "observe/step_record.h"

#include <algorithm>
#include <string_view>

#include "device/device_clock.h"
#include "parallel/grad_buckets.h"
#include "parallel/ring_attention.h"
#include "profiler/kernel_region.h"

namespace mtrain::observe {

// The last phase's work ends where the record is now.
static void close_phase(StepRecord& r) {
  if (r.phases.empty()) return;
  PhaseRecord& p = r.phases.back();
  p.end_kernel = static_cast<int64_t>(r.kernels.size());
  p.end_comm = static_cast<int64_t>(r.comms.size());
  p.end_ring_wait = static_cast<int64_t>(r.ring_waits.size());
}

void StepRecorder::on_step_end(const StepMetrics&) {
  if (recording_) close_phase(record_);
  recording_ = false;
}

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
    close_phase(record_);
    phase_ = static_cast<int>(record_.phases.size());
    record_.phases.push_back({r.name, static_cast<int>(r.index), r.chunk, static_cast<int64_t>(record_.kernels.size()),
                              static_cast<int64_t>(record_.comms.size()),
                              static_cast<int64_t>(record_.ring_waits.size())});
  }
  if (r.kind == profiler::Kind::kKernel && open_kernels_++ == 0) record_.kernels.push_back({r.name, r.work, phase_});
  const std::string_view name = r.name;
  if (r.kind == profiler::Kind::kOp && name == parallel::kRingBlockNeeded)
    record_.ring_waits.push_back(static_cast<int64_t>(record_.kernels.size()));
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
  if (recording_ && r.kind == profiler::Kind::kPhase) {
    close_phase(record_);  // again at the next phase's begin: what runs between is this phase's too
    phase_ = -1;
  }
}

StepOrder step_order(const StepRecord& r) {
  StepOrder o;
  const auto add = [&](int as, int64_t kb, int64_t ke, int64_t cb, int64_t ce, int64_t wb, int64_t we) {
    const int64_t base = static_cast<int64_t>(o.kernel.size()) - kb;  // the step's index of record kernel kb
    for (int64_t k = kb; k < ke; ++k) {
      o.kernel.push_back(static_cast<int32_t>(k));
      o.kernel_phase.push_back(r.kernels[static_cast<size_t>(k)].phase < 0 ? -1 : as);
    }
    for (int64_t c = cb; c < ce; ++c) {
      const CommRecord& m = r.comms[static_cast<size_t>(c)];
      o.comm.push_back(static_cast<int32_t>(c));
      o.comm_phase.push_back(m.phase < 0 ? -1 : as);
      o.comm_kernels_before.push_back(m.kernels_before + base);
    }
    for (int64_t w = wb; w < we; ++w) o.ring_waits.push_back(r.ring_waits[static_cast<size_t>(w)] + base);
  };
  if (r.copy_of.empty() || r.phases.empty()) {  // every entry where it was recorded
    o.kernel.reserve(r.kernels.size());
    for (size_t k = 0; k < r.kernels.size(); ++k) {
      o.kernel.push_back(static_cast<int32_t>(k));
      o.kernel_phase.push_back(r.kernels[k].phase);
    }
    for (size_t c = 0; c < r.comms.size(); ++c) {
      o.comm.push_back(static_cast<int32_t>(c));
      o.comm_phase.push_back(r.comms[c].phase);
      o.comm_kernels_before.push_back(r.comms[c].kernels_before);
    }
    o.ring_waits = r.ring_waits;
    return o;
  }
  const PhaseRecord& first = r.phases.front();
  add(-1, 0, first.first_kernel, 0, first.first_comm, 0, first.first_ring_wait);
  for (size_t i = 0; i < r.phases.size(); ++i) {
    const PhaseRecord& p = r.phases[r.copy_of[i] < 0 ? i : static_cast<size_t>(r.copy_of[i])];
    add(static_cast<int>(i), p.first_kernel, p.end_kernel, p.first_comm, p.end_comm, p.first_ring_wait,
        p.end_ring_wait);
  }
  return o;
}

StepRecord expanded(const StepRecord& r) {
  if (r.copy_of.empty()) return r;
  const StepOrder o = step_order(r);
  StepRecord out;
  out.gathers_before_chunk = r.gathers_before_chunk;
  out.kernels.reserve(o.kernel.size());
  for (size_t i = 0; i < o.kernel.size(); ++i) {
    out.kernels.push_back(r.kernels[static_cast<size_t>(o.kernel[i])]);
    out.kernels.back().phase = o.kernel_phase[i];
  }
  for (size_t i = 0; i < o.comm.size(); ++i) {
    out.comms.push_back(r.comms[static_cast<size_t>(o.comm[i])]);
    out.comms.back().phase = o.comm_phase[i];
    out.comms.back().kernels_before = o.comm_kernels_before[i];
  }
  out.ring_waits = o.ring_waits;
  const PhaseRecord& first = r.phases.front();
  int64_t k = first.first_kernel, c = first.first_comm, w = first.first_ring_wait;
  for (size_t i = 0; i < r.phases.size(); ++i) {
    const PhaseRecord& src = r.phases[r.copy_of[i] < 0 ? i : static_cast<size_t>(r.copy_of[i])];
    PhaseRecord p = r.phases[i];
    p.first_kernel = k, p.first_comm = c, p.first_ring_wait = w;
    k += src.end_kernel - src.first_kernel;
    c += src.end_comm - src.first_comm;
    w += src.end_ring_wait - src.first_ring_wait;
    p.end_kernel = k, p.end_comm = c, p.end_ring_wait = w;
    out.phases.push_back(std::move(p));
  }
  return out;
}

bool is_microbatch_phase(const PhaseRecord& p) { return p.name == "forward_step" || p.name == "backward_step"; }

namespace {

// A blocking DP bucket collective: the gradient reduction (grad_sync) or the
// distributed optimizer's parameter gather (optimizer_step), over any
// gradient region's group (grad_regions.h).
bool is_dp_bucket_comm(const StepRecord& r, const CommRecord& m, int phase) {
  const bool dp_group = m.group == "dp" || m.group == "dp-cp" || m.group == "expt-dp";
  return dp_group && phase >= 0 && (r.phases[phase].name == "grad_sync" || r.phases[phase].name == "optimizer_step");
}

}  // namespace

CommLine comm_line(std::string_view group) {
  if (group == "cp") return CommLine::kContext;
  if (group == "ep" || group == "expt-tp" || group == "tp-ep" || group == "tp-ep-pp") return CommLine::kExpert;
  return CommLine::kTensor;
}

PhaseOverlap PhaseOverlap::of_profile(const device::DeviceProfile& p, bool tp_comm_overlap) {
  PhaseOverlap o{tp_comm_overlap, 1.0};
  if (p.compute_units > 0 && p.tp_overlap_units > 0 && p.tp_overlap_units < p.compute_units)
    o.rs_gemm_slowdown = static_cast<double>(p.compute_units) / (p.compute_units - p.tp_overlap_units);
  return o;
}

double priced_bytes(const CommRecord& m) {
  if (m.op == parallel::CommOp::kSendRecv) return static_cast<double>(std::max(m.bytes, m.recv_bytes));
  return static_cast<double>(m.bytes + m.recv_bytes);
}

namespace {

// One micro-batch phase on the device clock (device/device_clock.h): its
// compute stream, the communication stream beside it (PhaseOverlap), and
// the host that issues its work, one op per host_dispatch_s.
struct PhaseClock {
  device::DeviceClock dev;
  double host = 0;            // when the host has issued the work so far
  bool ring_pending = false;  // a CP pass in flight
  double last_gemm_s = -1;    // the item just placed was a GEMM of this time (-1: it was not)
  double pending_gather_s = -1, pending_gather_chunks = 1;  // a TP all-gather waiting for its GEMM
  double c() const { return dev.free_at(device::Stream::kCompute); }
};

bool tp_overlappable(const CommRecord& m, const PhaseOverlap& o) {
  return o.tp_comm_overlap && m.group == "tp" && m.group_size > 1 &&
         (m.op == parallel::CommOp::kAllGather || m.op == parallel::CommOp::kReduceScatter);
}

// The pipelined time of a collective split into `chunks` beside a GEMM.
double pipelined(double comm, double gemm, double chunks) {
  return std::max(comm, gemm) + std::min(comm, gemm) / std::max(1.0, chunks);
}

}  // namespace

RecordCost record_cost(const StepRecord& r, const device::CostModel& cost, bool sixteen_bit,
                       const std::function<int(std::string_view)>& nodes, const PhaseOverlap& overlap) {
  using device::Stream;
  RecordCost c;
  c.phase_s.assign(r.phases.size(), 0.0);
  std::vector<PhaseClock> clock(r.phases.size());
  const double dispatch = cost.constants().host_dispatch_s;
  std::vector<char> microbatch_phase(r.phases.size());
  for (size_t p = 0; p < r.phases.size(); ++p) microbatch_phase[p] = is_microbatch_phase(r.phases[p]);
  const auto in_microbatch = [&](int phase) { return phase >= 0 && microbatch_phase[static_cast<size_t>(phase)]; };
  // The host issues the next op of the phase; it runs on the device no
  // earlier (the compute stream idles until then: host_wait_s).
  const auto issue = [&](PhaseClock& pc) {
    pc.host += dispatch;
    c.host_wait_s += std::max(0.0, pc.host - pc.c());
    pc.dev.wait_until(Stream::kCompute, pc.host);
  };
  // A collective that holds the compute stream for `t` (it adds t to the phase).
  const auto add_comm_time = [&](PhaseClock& pc, CommLine line, double t) {
    pc.dev.place(Stream::kCompute, pc.c(), t);
    c.phase_comm_s += t;
    c.phase_line_s[static_cast<int>(line)] += t;
  };
  const auto wait_ring = [&](PhaseClock& pc) {
    if (!pc.ring_pending) return;
    const double exposed = std::max(0.0, pc.dev.free_at(Stream::kComm) - pc.c());  // the part not beside kernels
    add_comm_time(pc, CommLine::kContext, exposed);
    c.phase_hidden_s -= exposed;
    pc.ring_pending = false;
  };
  // Kernels and collectives in recorded order: a collective with
  // kernels_before == i comes before kernel i.
  size_t next_comm = 0;
  const auto place_comm = [&](const CommRecord& m, int phase, bool next_is_gemm) {
    const double t =
        cost.comm_seconds(parallel::cost_collective(m.op), priced_bytes(m), {m.group_size, nodes(m.group)});
    if (m.overlapped) {
      OverlappedComm o{phase, 0.0, t, m.op == parallel::CommOp::kAllGather};
      if (phase >= 0) o.offset_s = clock[phase].c();
      c.overlapped.push_back(o);
      c.dp_comm_s += t;
      return;
    }
    if (m.group == "pp") {
      c.p2p_message_s = std::max(c.p2p_message_s, t);
      return;
    }
    if (in_microbatch(phase)) {
      PhaseClock& pc = clock[phase];
      const CommLine line = comm_line(m.group);
      issue(pc);
      if (pc.pending_gather_s >= 0) {  // the gather waiting for a GEMM got another collective instead
        add_comm_time(pc, CommLine::kTensor, pc.pending_gather_s);
        pc.pending_gather_s = -1;
      }
      if (m.group == "cp" && m.op == parallel::CommOp::kSendRecv) {
        wait_ring(pc);
        pc.dev.place(Stream::kComm, pc.c(), t);
        pc.ring_pending = true;
        c.phase_hidden_s += t;
      } else if (tp_overlappable(m, overlap) && m.op == parallel::CommOp::kAllGather && next_is_gemm) {
        pc.pending_gather_s = t;
        pc.pending_gather_chunks = m.group_size;
      } else if (tp_overlappable(m, overlap) && m.op == parallel::CommOp::kReduceScatter && pc.last_gemm_s >= 0) {
        const double added = pipelined(t, pc.last_gemm_s * overlap.rs_gemm_slowdown, m.group_size) - pc.last_gemm_s;
        add_comm_time(pc, line, added);
        c.phase_hidden_s += t - added;
      } else {
        add_comm_time(pc, line, t);
      }
      pc.last_gemm_s = -1;
      return;
    }
    c.tail_comm_s += t;
    // The distributed optimizer's param all-gather: the optimizer phase's only all-gather.
    if (m.op == parallel::CommOp::kAllGather && phase >= 0 && r.phases[phase].name == "optimizer_step")
      c.param_gather_s += t;
    if (is_dp_bucket_comm(r, m, phase)) {
      c.dp_comm_s += t;
      c.dp_blocking_s += t;
    }
  };
  size_t next_wait = 0;
  // The step's entries in order (a repeated phase's read again), each
  // distinct kernel priced once.
  const StepOrder o = step_order(r);
  std::vector<double> price(r.kernels.size(), -1.0);
  const size_t kernels = o.kernel.size();
  for (size_t i = 0; i <= kernels; ++i) {
    for (; next_wait < o.ring_waits.size() && o.ring_waits[next_wait] <= static_cast<int64_t>(i); ++next_wait)
      if (i < kernels && in_microbatch(o.kernel_phase[i])) wait_ring(clock[o.kernel_phase[i]]);
    const bool gemm_next = i < kernels && r.kernels[o.kernel[i]].work.kind == KernelKind::kGemm;
    for (; next_comm < o.comm.size() && o.comm_kernels_before[next_comm] <= static_cast<int64_t>(i); ++next_comm)
      place_comm(r.comms[o.comm[next_comm]], o.comm_phase[next_comm],
                 gemm_next && o.comm_phase[next_comm] == o.kernel_phase[i]);
    if (i == kernels) break;
    const KernelRecord& k = r.kernels[o.kernel[i]];
    const int phase = o.kernel_phase[i];
    double& t = price[o.kernel[i]];
    if (t < 0) t = cost.kernel_seconds(k.work, sixteen_bit);
    if (!in_microbatch(phase)) {
      c.optimizer_s += t;
      continue;
    }
    c.compute_s += t;
    PhaseClock& pc = clock[phase];
    issue(pc);
    pc.dev.place(Stream::kCompute, pc.c(), t);
    if (pc.pending_gather_s >= 0) {
      const double both = pipelined(pc.pending_gather_s, t, pc.pending_gather_chunks);
      add_comm_time(pc, CommLine::kTensor, both - t);
      c.phase_hidden_s += pc.pending_gather_s - (both - t);
      pc.pending_gather_s = -1;
    }
    pc.last_gemm_s = k.work.kind == KernelKind::kGemm ? t : -1;
  }
  for (size_t p = 0; p < r.phases.size(); ++p) {
    PhaseClock& pc = clock[p];
    if (pc.pending_gather_s >= 0) add_comm_time(pc, CommLine::kTensor, pc.pending_gather_s);  // no GEMM followed
    wait_ring(pc);
    c.phase_s[p] = in_microbatch(static_cast<int>(p)) ? pc.c() : 0.0;
  }
  return c;
}

}  // namespace mtrain::observe
