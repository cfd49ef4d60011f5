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
  if (j + 1 < r.phases.size()) {
    const PhaseRecord& n = r.phases[j + 1];
    return {p.first_kernel, n.first_kernel, p.first_comm, n.first_comm, p.first_ring_wait, n.first_ring_wait};
  }
  return {p.first_kernel,    static_cast<int64_t>(r.kernels.size()),
          p.first_comm,      static_cast<int64_t>(r.comms.size()),
          p.first_ring_wait, static_cast<int64_t>(r.ring_waits.size())};
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

// Appends short-step phase j (with what follows it up to the next phase) as
// phase `as`, its micro-batch moved on by `shift`; false when an entry of it
// names another phase than its own.
bool append_phase(const StepRecord& r, size_t j, int shift, int as, StepRecord& out) {
  const Segment s = segment(r, j);
  const int64_t moved = static_cast<int64_t>(out.kernels.size()) - s.kernel_begin;
  PhaseRecord p = r.phases[j];
  if (observe::is_microbatch_phase(p)) p.microbatch += shift;
  p.first_kernel = static_cast<int64_t>(out.kernels.size());
  p.first_comm = static_cast<int64_t>(out.comms.size());
  p.first_ring_wait = static_cast<int64_t>(out.ring_waits.size());
  out.phases.push_back(std::move(p));
  const auto own = [&](int phase) { return phase == static_cast<int>(j) ? as : phase; };
  const size_t k0 = out.kernels.size(), c0 = out.comms.size();
  out.kernels.insert(out.kernels.end(), r.kernels.begin() + s.kernel_begin, r.kernels.begin() + s.kernel_end);
  out.comms.insert(out.comms.end(), r.comms.begin() + s.comm_begin, r.comms.begin() + s.comm_end);
  for (size_t k = k0; k < out.kernels.size(); ++k) {
    KernelRecord& kr = out.kernels[k];
    if (kr.phase != -1 && kr.phase != static_cast<int>(j)) return false;
    kr.phase = own(kr.phase);
  }
  for (size_t c = c0; c < out.comms.size(); ++c) {
    CommRecord& cr = out.comms[c];
    if (cr.phase != -1 && cr.phase != static_cast<int>(j)) return false;
    cr.phase = own(cr.phase);
    cr.kernels_before += moved;
  }
  for (int64_t w = s.wait_begin; w < s.wait_end; ++w)
    out.ring_waits.push_back(r.ring_waits[static_cast<size_t>(w)] + moved);
  return true;
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

  StepRecord out;
  out.gathers_before_chunk = r.gathers_before_chunk;
  const Segment first_period = segment(r, static_cast<size_t>(a)), after = segment(r, static_cast<size_t>(a + P));
  const auto copies = static_cast<size_t>(p.copies());
  out.phases.reserve(r.phases.size() + copies * static_cast<size_t>(P));
  out.kernels.reserve(r.kernels.size() + copies * static_cast<size_t>(after.kernel_begin - first_period.kernel_begin));
  out.comms.reserve(r.comms.size() + copies * static_cast<size_t>(after.comm_begin - first_period.comm_begin));
  const PhaseRecord& first = r.phases.front();
  out.kernels.assign(r.kernels.begin(), r.kernels.begin() + first.first_kernel);
  out.comms.assign(r.comms.begin(), r.comms.begin() + first.first_comm);
  out.ring_waits.assign(r.ring_waits.begin(), r.ring_waits.begin() + first.first_ring_wait);
  const int full_actions = static_cast<int>(short_actions) + p.copies() * P;
  for (int i = 0; i < full_actions; ++i) {
    const Source s = source_of(i, p);
    if (!append_phase(r, static_cast<size_t>(s.index), s.shift, i, out)) return std::nullopt;
  }
  for (size_t j = short_actions; j < r.phases.size(); ++j)
    if (!append_phase(r, j, 0, static_cast<int>(j) + p.copies() * P, out)) return std::nullopt;
  return out;
}

}  // namespace mtrain::plan
