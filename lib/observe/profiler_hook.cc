// ProfilerHook: recording (the hot path) and the window's life cycle. The
// writer is in profiler_trace.cc.
#include "observe/profiler_hook.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "config/profile_args.h"
#include "profiler/kernel_region.h"

namespace mtrain::observe {

ProfilerOptions profiler_options(const config::Args& a) {
  ProfilerOptions o;
  o.schedule = profiler::Schedule::from_step_window(a.profile_step_start, a.profile_step_end);
  o.ranks = config::profile_ranks(a.profile_ranks);
  o.level_name = a.profile_level;
  o.level = a.profile_level == "level2"   ? profiler::Kind::kKernel
            : a.profile_level == "level1" ? profiler::Kind::kOp
                                          : profiler::Kind::kPhase;
  o.with_cpu = a.profile_with_cpu;
  o.with_stack = a.profile_with_stack;
  o.with_memory = a.profile_with_memory;
  o.record_shapes = a.profile_record_shapes;
  o.save_path = a.profile_save_path;
  o.dtype_bytes = a.bf16 || a.fp16 ? 2 : 4;
  return o;
}

ProfilerHook::ProfilerHook(ProfilerOptions opts, const device::Device& dev, parallel::ParallelState* state, int rank,
                           FileSystem& fs)
    : opts_(std::move(opts)), dev_(dev), state_(state), rank_(rank), fs_(fs), cost_(dev.profile()) {
  opts_.schedule.check();
  const int world = state_ ? state_->world_size() : 1;
  const bool all = std::find(opts_.ranks.begin(), opts_.ranks.end(), -1) != opts_.ranks.end();
  for (int r = 0; r < world; ++r)
    if (all || std::find(opts_.ranks.begin(), opts_.ranks.end(), r) != opts_.ranks.end()) profiled_ranks_.push_back(r);
  if (!state_ && profiled_ranks_.empty() && (all || std::count(opts_.ranks.begin(), opts_.ranks.end(), rank_)))
    profiled_ranks_.push_back(rank_);
  profiled_ = std::find(profiled_ranks_.begin(), profiled_ranks_.end(), rank_) != profiled_ranks_.end();
  // Which of this rank's groups span nodes (they use the inter-node link).
  if (state_) group_nodes_ = state_->grid().group_nodes(rank_, dev.profile().devices_per_node);
}

double ProfilerHook::now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

profiler::ScheduleAction ProfilerHook::action_of(int64_t iteration) const {
  return opts_.schedule.action(iteration - first_iteration_);
}

std::optional<profiler::Kind> ProfilerHook::region_depth(int64_t iteration) const {
  if (!profiled_ || action_of(iteration) == profiler::ScheduleAction::kNone) return std::nullopt;
  return profiler::Kind::kKernel;  // kernels drive the simulated NPU clock at every level
}

bool ProfilerHook::region_tensors(int64_t iteration) const {
  return opts_.record_shapes && region_depth(iteration).has_value();
}

void ProfilerHook::on_train_begin(const TrainInfo& info) { first_iteration_ = info.start_iteration + 1; }

void ProfilerHook::on_step_begin(int64_t iteration) {
  action_ = action_of(iteration);
  iteration_ = iteration;
  if (action_ == profiler::ScheduleAction::kNone) return;
  if (!window_open_) {
    window_open_ = true;
    // Warmup steps are traced and discarded (PyTorch): the window's first
    // iteration is its first recorded one.
    window_first_ = iteration;
    while (action_of(window_first_) == profiler::ScheduleAction::kWarmup) ++window_first_;
    int64_t last = window_first_;
    while (action_of(last) != profiler::ScheduleAction::kRecordAndSave) ++last;
    if (!opts_.quiet && profiled_ && rank_ == profiled_ranks_.front())
      fmt::print("[profiler] recording iterations {}..{} on {} rank(s) at {} into {}\n", window_first_, last,
                 profiled_ranks_.size(), opts_.level_name, opts_.save_path);
  }
  window_last_ = iteration;
  if (!profiled_) return;
  in_step_ = true;
  profiler::set_compute_dtype_bytes(opts_.dtype_bytes);
  open_.clear();
  open_kernels_ = 0;
  const double t = now_us();
  clock_.wait_until(device::Stream::kCompute, t);
  if (opts_.with_memory) sample_memory(t);
}

void ProfilerHook::on_step_end(const StepMetrics&) {
  if (!in_step_) return;
  in_step_ = false;
  if (opts_.with_memory) sample_memory(now_us());
  if (action_ == profiler::ScheduleAction::kWarmup) discard_recording();  // traced, then discarded (PyTorch)
}

void ProfilerHook::discard_recording() {
  npu_kernel_us_ = 0;
  spans_.clear();
  comms_.clear();
  shapes_.clear();
  memory_.clear();
}

void ProfilerHook::on_iteration_end(int64_t /*iteration*/) {
  if (action_ == profiler::ScheduleAction::kRecordAndSave) save();
}

void ProfilerHook::on_train_end(const TrainInfo&) {
  // Training ended inside the window: save what was recorded (every rank
  // takes this branch alike, so the barrier matches).
  if (window_open_) {
    if (!opts_.quiet && profiled_ && rank_ == profiled_ranks_.front())
      fmt::print("[profiler] training ended inside the profiling window (at iteration {})\n", window_last_);
    save();
  }
}

void ProfilerHook::sample_memory(double t) {
  const device::MemoryStats& s = dev_.stats();
  memory_.push_back(MemorySample{t, s.allocated, s.reserved, s.by_category});
}

double ProfilerHook::place_on_device(double start, double dur) {
  const double begin = clock_.place(device::Stream::kCompute, start, dur);
  // The open regions without device work so far start with this work.
  for (auto it = open_.rbegin(); it != open_.rend() && !it->placed; ++it) {
    it->placed = true;
    if (it->span >= 0) spans_[it->span].npu_begin = begin;
  }
  return begin;
}

void ProfilerHook::on_region_begin(const profiler::Region& r, std::span<const profiler::TensorRef> t) {
  if (!in_step_) return;
  const bool kernel = r.kind == profiler::Kind::kKernel;
  const bool keep = static_cast<int>(r.kind) <= static_cast<int>(opts_.level);
  if (!keep && !kernel) return;  // a module or op below the level: not written, no device work of its own
  const double now = now_us();
  if (kernel && open_kernels_++ == 0) {
    // Outermost kernel: it runs on the device (nested ones are part of it).
    const double dur = cost_.kernel_seconds(r.work, opts_.dtype_bytes == 2) * 1e6;
    const double begin = place_on_device(now, dur);
    npu_kernel_us_ += dur;
    if (keep) {
      ProfiledSpan& s = spans_.emplace_back();
      s.npu_begin = begin;
      s.npu_end = begin + dur;
    }
  } else if (keep) {
    spans_.emplace_back();
  }
  int32_t span = -1;
  if (keep) {
    span = static_cast<int32_t>(spans_.size() - 1);
    ProfiledSpan& s = spans_.back();
    s.name = r.name;
    s.fused_by = r.fused_by;
    s.kind = r.kind;
    s.pass = r.pass;
    s.chunk = r.chunk;
    s.index = r.index;
    s.iteration = iteration_;
    s.host_begin = now;
    s.flops = r.work.flops;
    s.bytes = r.work.bytes;
    s.m = r.work.m;
    s.n = r.work.n;
    s.k = r.work.k;
    for (auto it = open_.rbegin(); it != open_.rend(); ++it)
      if (it->span >= 0) {
        s.parent = it->span;
        break;
      }
    if (opts_.record_shapes && !t.empty() && r.kind >= profiler::Kind::kModule) {
      s.shapes_in = static_cast<int32_t>(shapes_.size());
      s.n_in = static_cast<int32_t>(t.size());
      for (const auto& ref : t) shapes_.push_back({ref.role, ref.dtype, ref.ndim, ref.dims});
    }
  }
  // A region inside a kernel (the steps of an unfused kernel) is part of that
  // kernel's device work: no device time of its own, not on the NPU track.
  const bool inside_kernel = kernel ? open_kernels_ > 1 : open_kernels_ > 0;
  open_.push_back({span, kernel, kernel || inside_kernel});
  if (opts_.with_memory && r.kind <= profiler::Kind::kPhase) sample_memory(now);
}

void ProfilerHook::on_region_end(const profiler::Region& r, std::span<const profiler::TensorRef> t) {
  if (!in_step_) return;
  const bool kernel = r.kind == profiler::Kind::kKernel;
  const bool keep = static_cast<int>(r.kind) <= static_cast<int>(opts_.level);
  if (!keep && !kernel) return;
  if (open_.empty()) return;  // a region opened before the step began (cannot happen with RAII scopes)
  const Open o = open_.back();
  open_.pop_back();
  const double now = now_us();
  if (kernel) --open_kernels_;
  if (o.span < 0) return;
  ProfiledSpan& s = spans_[o.span];
  s.host_end = now;
  if (!kernel && open_kernels_ == 0) {  // (a region inside a kernel stays on the CPU track)
    if (!o.placed) {
      // No instrumented device work inside: the device takes the host's time.
      s.npu_begin = place_on_device(s.host_begin, now - s.host_begin);
    }
    s.npu_end = clock_.free_at(device::Stream::kCompute);
  }
  if (opts_.record_shapes && !t.empty() && r.kind >= profiler::Kind::kModule) {
    s.shapes_out = static_cast<int32_t>(shapes_.size());
    s.n_out = static_cast<int32_t>(t.size());
    for (const auto& ref : t) shapes_.push_back({ref.role, ref.dtype, ref.ndim, ref.dims});
  }
  if (opts_.with_memory && r.kind <= profiler::Kind::kPhase) sample_memory(now);
}

void ProfilerHook::on_comm(const parallel::CommEvent& e) {
  if (!in_step_) return;
  const double end = now_us();
  ProfiledComm& c = comms_.emplace_back();
  c.op = e.op;
  const size_t n = std::min(e.group.size(), c.group.size() - 1);
  std::memcpy(c.group.data(), e.group.data(), n);
  c.group_size = e.group_size;
  c.bytes = e.bytes;
  c.recv_bytes = e.recv_bytes;
  c.peer = e.peer;
  c.recv_peer = e.recv_peer;
  c.nonblocking = e.nonblocking;
  c.iteration = iteration_;
  c.host_end = end;
  c.host_begin = end - e.seconds * 1e6;
  for (auto it = open_.rbegin(); it != open_.rend(); ++it)
    if (it->span >= 0) {
      c.parent = it->span;
      break;
    }
  const int nodes = parallel::ProcessGrid::nodes_of(group_nodes_, e.group);
  const double dur = cost_.comm_seconds(parallel::cost_collective(e.op), static_cast<double>(e.bytes + e.recv_bytes),
                                        {e.group_size, nodes}) *
                     1e6;
  // Collectives run on their own stream after the compute issued before them;
  // a blocking one holds the compute stream until it ends, a non-blocking one
  // (an overlapped DP bucket reduction) runs beside the kernels.
  clock_.wait_until(device::Stream::kComm, clock_.free_at(device::Stream::kCompute));
  c.npu_begin = clock_.place(device::Stream::kComm, c.host_begin, dur);
  c.npu_end = c.npu_begin + dur;
  if (!e.nonblocking) place_on_device(c.npu_begin, dur);
}

}  // namespace mtrain::observe
