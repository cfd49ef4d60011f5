#include "plan/steady_state.h"

#include <algorithm>

namespace mtrain::plan {

namespace {

using observe::CommRecord;
using observe::KernelRecord;
using observe::PhaseRecord;
using observe::StepRecord;
using parallel::PipeAction;

// Full-step action i comes from short-step action `index`, its micro-batch moved on by `shift`.
struct Source {
  int index = 0, shift = 0;
};

// The inserted copies repeat the short step's period [a, a + P) with the
// micro-batches moved on by q per copy; what follows them is the rest of the
// short step moved on by q per copy.
Source source_of(int i, const SteadyStatePlan& p) {
  const int a = p.period_start, P = p.period_actions, inserted = p.copies() * P;
  if (i < a + P) return {i, 0};
  if (i < a + P + inserted) return {a + (i - a - P) % P, ((i - a - P) / P + 1) * p.period_microbatches};
  return {i - inserted, p.copies() * p.period_microbatches};
}

bool same_action(const PipeAction& x, const PipeAction& y, int shift) {  // the slot is a buffer index, not work
  return x.op == y.op && x.chunk == y.chunk && x.microbatch + shift == y.microbatch;
}

// The full schedule is the short one with the periods inserted.
bool expands_to(const std::vector<PipeAction>& have, const SteadyStatePlan& p, const std::vector<PipeAction>& want) {
  if (want.size() != have.size() + static_cast<size_t>(p.copies() * p.period_actions)) return false;
  for (size_t i = 0; i < want.size(); ++i) {
    const Source s = source_of(static_cast<int>(i), p);
    if (!same_action(have[static_cast<size_t>(s.index)], want[i], s.shift)) return false;
  }
  return true;
}

// What phase j holds: its kernels, collectives and ring waits up to the next phase.
struct Segment {
  int64_t kernel_begin, kernel_end, comm_begin, comm_end, wait_begin, wait_end;
};

Segment segment(const StepRecord& r, size_t j) {
  const PhaseRecord& p = r.phases[j];
  return {p.first_kernel, p.end_kernel, p.first_comm, p.end_comm, p.first_ring_wait, p.end_ring_wait};
}

bool same_comm(const CommRecord& x, const CommRecord& y) {
  return x.op == y.op && x.group == y.group && x.group_size == y.group_size && x.bytes == y.bytes &&
         x.recv_bytes == y.recv_bytes && x.overlapped == y.overlapped;
}

// Phases j1 and j2 = j1 + P recorded the same work, j2's micro-batch q further on.
bool same_work(const StepRecord& r, size_t j1, size_t j2, int q) {
  const PhaseRecord &p1 = r.phases[j1], &p2 = r.phases[j2];
  if (p1.name != p2.name || p1.chunk != p2.chunk || p1.microbatch + q != p2.microbatch) return false;
  const Segment s1 = segment(r, j1), s2 = segment(r, j2);
  if (s1.kernel_end - s1.kernel_begin != s2.kernel_end - s2.kernel_begin ||
      s1.comm_end - s1.comm_begin != s2.comm_end - s2.comm_begin ||
      s1.wait_end - s1.wait_begin != s2.wait_end - s2.wait_begin)
    return false;
  for (int64_t k = 0; k < s1.kernel_end - s1.kernel_begin; ++k) {
    const KernelRecord &x = r.kernels[static_cast<size_t>(s1.kernel_begin + k)],
                       &y = r.kernels[static_cast<size_t>(s2.kernel_begin + k)];
    if (x.name != y.name || !(x.work == y.work) || (x.phase == -1) != (y.phase == -1)) return false;
  }
  for (int64_t c = 0; c < s1.comm_end - s1.comm_begin; ++c) {
    const CommRecord &x = r.comms[static_cast<size_t>(s1.comm_begin + c)],
                     &y = r.comms[static_cast<size_t>(s2.comm_begin + c)];
    if (!same_comm(x, y) || (x.phase == -1) != (y.phase == -1) ||
        x.kernels_before - s1.kernel_begin != y.kernels_before - s2.kernel_begin)
      return false;
  }
  for (int64_t w = 0; w < s1.wait_end - s1.wait_begin; ++w)
    if (r.ring_waits[static_cast<size_t>(s1.wait_begin + w)] - s1.kernel_begin !=
        r.ring_waits[static_cast<size_t>(s2.wait_begin + w)] - s2.kernel_begin)
      return false;
  return true;
}

// The device in the same state (what is held now), and the peaks as far as they came.
bool same_state(const device::MemoryStats& x, const device::MemoryStats& y) {
  return x.allocated == y.allocated && x.reserved == y.reserved && x.by_category == y.by_category &&
         x.runtime == y.runtime && x.communicators == y.communicators && x.host == y.host &&
         x.contingent == y.contingent;
}
bool same_peaks(const device::MemoryStats& x, const device::MemoryStats& y) {
  return x.max_allocated == y.max_allocated && x.max_reserved == y.max_reserved && x.max_host == y.max_host;
}

// Each phase's entries follow the one before's, and name it or no phase
// (what a copy reads must be its own phase's work).
bool entries_in_their_phases(const StepRecord& r) {
  Segment prev{0, r.phases.front().first_kernel, 0, r.phases.front().first_comm, 0, r.phases.front().first_ring_wait};
  for (int64_t k = 0; k < prev.kernel_end; ++k)
    if (r.kernels[static_cast<size_t>(k)].phase != -1) return false;
  for (int64_t c = 0; c < prev.comm_end; ++c)
    if (r.comms[static_cast<size_t>(c)].phase != -1) return false;
  for (size_t j = 0; j < r.phases.size(); ++j) {
    const Segment s = segment(r, j);
    if (s.kernel_begin != prev.kernel_end || s.comm_begin != prev.comm_end || s.wait_begin != prev.wait_end)
      return false;
    const int own = static_cast<int>(j);
    for (int64_t k = s.kernel_begin; k < s.kernel_end; ++k)
      if (const int ph = r.kernels[static_cast<size_t>(k)].phase; ph != -1 && ph != own) return false;
    for (int64_t c = s.comm_begin; c < s.comm_end; ++c)
      if (const int ph = r.comms[static_cast<size_t>(c)].phase; ph != -1 && ph != own) return false;
    prev = s;
  }
  return prev.kernel_end == static_cast<int64_t>(r.kernels.size()) &&
         prev.comm_end == static_cast<int64_t>(r.comms.size()) &&
         prev.wait_end == static_cast<int64_t>(r.ring_waits.size());
}

}  // namespace

std::optional<SteadyStatePlan> plan_steady_state(const parallel::PipelineShape& full) {
  const int q = full.stages > 1 && full.chunks > 1 ? full.stages : 1;
  const int P = 2 * q * full.chunks;
  const std::vector<PipeAction> want = parallel::pipeline_actions(full);
  const int first = full.microbatches % q == 0 ? q : full.microbatches % q;
  for (int m = first; m < full.microbatches; m += q) {
    parallel::PipelineShape s = full;
    s.microbatches = m;
    const std::vector<PipeAction> have = parallel::pipeline_actions(s);
    // The compared periods hold neither a chunk's first micro-batch (its
    // gradients zeroed, its parameters awaited) nor its last (its gradients
    // final): they start at the first action after the warm-up's forwards
    // from which two periods stay inside micro-batches 1 .. m - 2.
    int warmup = 0;
    while (warmup < static_cast<int>(have.size()) && have[static_cast<size_t>(warmup)].op == parallel::PipeOp::kForward)
      ++warmup;
    for (int a = warmup; a + 2 * P < static_cast<int>(have.size()); ++a) {
      const bool inside = std::all_of(have.begin() + a, have.begin() + a + 2 * P,
                                      [&](const PipeAction& x) { return x.microbatch >= 1 && x.microbatch <= m - 2; });
      if (!inside) continue;
      const SteadyStatePlan p{m, full.microbatches, a, P, q};
      if (expands_to(have, p, want)) return p;
      break;
    }
  }
  return std::nullopt;
}

std::optional<StepRecord> expand_steady_state(const StepRecord& r, const std::vector<device::MemoryStats>& at_begin,
                                              const SteadyStatePlan& p) {
  const int a = p.period_start, P = p.period_actions, q = p.period_microbatches;
  const size_t short_actions = static_cast<size_t>(P / (2 * q)) * 2 * static_cast<size_t>(p.microbatches);
  if (at_begin.size() != r.phases.size() || r.phases.size() <= short_actions) return std::nullopt;
  for (size_t j = 0; j < r.phases.size(); ++j)
    if (observe::is_microbatch_phase(r.phases[j]) != (j < short_actions)) return std::nullopt;
  if (static_cast<size_t>(a + 2 * P) >= short_actions) return std::nullopt;
  for (int t = 0; t < P; ++t)
    if (!same_work(r, static_cast<size_t>(a + t), static_cast<size_t>(a + P + t), q)) return std::nullopt;
  const auto at = [&](int j) { return at_begin[static_cast<size_t>(j)]; };
  if (!same_state(at(a), at(a + P)) || !same_state(at(a + P), at(a + 2 * P)) || !same_peaks(at(a + P), at(a + 2 * P)))
    return std::nullopt;

  if (!entries_in_their_phases(r)) return std::nullopt;
  // The stepped work stays where it is; the inserted phases repeat the first
  // period's, and the phases after them move on by the copies.
  StepRecord out = r;
  const int moved = p.copies() * P;
  const auto renumber = [&](int phase) { return phase >= a + P ? phase + moved : phase; };
  for (KernelRecord& k : out.kernels) k.phase = renumber(k.phase);
  for (CommRecord& c : out.comms) c.phase = renumber(c.phase);
  const int full_actions = static_cast<int>(short_actions) + moved;
  out.phases.clear();
  out.phases.reserve(r.phases.size() + static_cast<size_t>(moved));
  out.copy_of.reserve(r.phases.size() + static_cast<size_t>(moved));
  for (int i = 0; i < full_actions; ++i) {
    const Source src = source_of(i, p);
    PhaseRecord ph = r.phases[static_cast<size_t>(src.index)];
    ph.microbatch += src.shift;
    out.phases.push_back(std::move(ph));
    const bool copy = i >= a + P && i < a + P + moved;
    out.copy_of.push_back(copy ? src.index : -1);
  }
  for (size_t j = short_actions; j < r.phases.size(); ++j) {
    out.phases.push_back(r.phases[j]);
    out.copy_of.push_back(-1);
  }
  return out;
}

}  // namespace mtrain::plan
