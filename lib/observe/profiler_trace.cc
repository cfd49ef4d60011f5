// ProfilerHook: the end of the window. Chrome Trace Event Format per rank
// (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU):
// "X" complete events (ts, dur in µs), "C" counters, "M" metadata naming the
// process (rank and its tp/pp/dp coordinates) and threads (tracks); the
// summary table; the merged trace of all profiled ranks.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/errors.h"
#include "observe/profiler_hook.h"

namespace mtrain::observe {

namespace {

using nlohmann::json;

constexpr int kCpuTrack = 1, kNpuTrack = 2, kCommTrack = 3;

json shape_json(const ProfiledShape& s) {
  json dims = json::array();
  for (int i = 0; i < s.ndim; ++i) dims.push_back(s.dims[i]);
  return json{{"role", s.role}, {"shape", dims}, {"dtype", s.dtype}};
}

std::string comm_name(const ProfiledComm& c) {
  return fmt::format("{} ({})", parallel::comm_op_name(c.op), c.group.data());
}

}  // namespace

// Builds the JSON and the summary of one rank's window.
struct TraceWriter {
  const ProfilerHook& h;

  // Megatron-style name: modules and ops joined through their module/op ancestors.
  std::string display_name(int32_t i) const {
    const ProfiledSpan& s = h.spans_[i];
    auto own = [&](const ProfiledSpan& x) {
      return x.index >= 0 && x.kind == profiler::Kind::kModule ? fmt::format("{}.{}", x.name, x.index)
                                                               : std::string(x.name);
    };
    switch (s.kind) {
      case profiler::Kind::kIteration:
        return fmt::format("ProfilerStep#{}", s.index);
      case profiler::Kind::kPhase:
      case profiler::Kind::kKernel:
        return s.name;
      default:
        break;
    }
    std::string name = own(s);
    for (int32_t p = s.parent; p >= 0; p = h.spans_[p].parent) {
      const ProfiledSpan& a = h.spans_[p];
      if (a.kind != profiler::Kind::kModule && a.kind != profiler::Kind::kOp) break;
      name = own(a) + "." + name;
    }
    return name;
  }

  json stack(int32_t parent) const {
    json st = json::array();
    for (int32_t p = parent; p >= 0; p = h.spans_[p].parent) st.push_back(display_name(p));
    std::reverse(st.begin(), st.end());
    return st;
  }

  json span_args(int32_t i) const {
    const ProfiledSpan& s = h.spans_[i];
    json a = json::object();
    a["iteration"] = s.iteration;
    if (s.pass != profiler::Pass::kNone) a["pass"] = profiler::pass_name(s.pass);
    if (s.kind == profiler::Kind::kPhase && s.index >= 0) a["microbatch"] = s.index;
    if (s.kind == profiler::Kind::kPhase) a["chunk"] = s.chunk;
    if (s.fused_by) a["fused_by"] = s.fused_by;
    if (s.kind == profiler::Kind::kKernel) {
      if (s.m || s.n || s.k) {
        a["m"] = s.m;
        a["n"] = s.n;
        a["k"] = s.k;
      }
      a["flops"] = s.flops;
      a["bytes"] = s.bytes;
    }
    if (h.opts_.record_shapes && (s.n_in || s.n_out)) {
      json in = json::array(), out = json::array();
      for (int j = 0; j < s.n_in; ++j) in.push_back(shape_json(h.shapes_[s.shapes_in + j]));
      for (int j = 0; j < s.n_out; ++j) out.push_back(shape_json(h.shapes_[s.shapes_out + j]));
      a["inputs"] = in;
      a["outputs"] = out;
    }
    if (h.opts_.with_stack) a["stack"] = stack(s.parent);
    return a;
  }

  json comm_args(const ProfiledComm& c) const {
    json a{{"op", parallel::comm_op_name(c.op)},
           {"group", c.group.data()},
           {"group_size", c.group_size},
           {"bytes", c.bytes},
           {"iteration", c.iteration}};
    if (c.recv_bytes) a["recv_bytes"] = c.recv_bytes;
    if (c.peer >= 0) a["peer"] = c.peer;
    if (c.recv_peer >= 0) a["recv_peer"] = c.recv_peer;
    if (c.nonblocking) a["nonblocking"] = true;
    if (h.opts_.with_stack) a["stack"] = stack(c.parent);
    return a;
  }

  static json complete(const std::string& name, const char* cat, int pid, int tid, double ts, double dur, json args) {
    return json{{"name", name},
                {"cat", cat},
                {"ph", "X"},
                {"pid", pid},
                {"tid", tid},
                {"ts", ts},
                {"dur", std::max(0.0, dur)},
                {"args", std::move(args)}};
  }

  static json meta(const char* what, int pid, int tid, json args) {
    return json{{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
  }

  json trace() const {
    const int pid = h.rank_;
    json ev = json::array();
    std::string proc = fmt::format("rank {}", h.rank_);
    if (h.state_) {
      const parallel::RankCoords c = h.state_->coords();
      proc += fmt::format(" (tp {}, pp {}, dp {}, cp {})", c.tp, c.pp, c.dp, c.cp);
    }
    ev.push_back(meta("process_name", pid, 0, {{"name", proc}}));
    ev.push_back(meta("process_sort_index", pid, 0, {{"sort_index", h.rank_}}));
    if (h.opts_.with_cpu) ev.push_back(meta("thread_name", pid, kCpuTrack, {{"name", "CPU (host wall time)"}}));
    ev.push_back(
        meta("thread_name", pid, kNpuTrack, {{"name", fmt::format("NPU (simulated {})", h.dev_.profile().name)}}));
    ev.push_back(meta("thread_name", pid, kCommTrack, {{"name", "NPU communication (simulated)"}}));
    for (int32_t i = 0; i < static_cast<int32_t>(h.spans_.size()); ++i) {
      const ProfiledSpan& s = h.spans_[i];
      const std::string name = display_name(i);
      const char* cat = profiler::kind_name(s.kind);
      if (h.opts_.with_cpu)
        ev.push_back(complete(name, cat, pid, kCpuTrack, s.host_begin, s.host_end - s.host_begin, span_args(i)));
      if (s.npu_begin >= 0)
        ev.push_back(complete(name, cat, pid, kNpuTrack, s.npu_begin, s.npu_end - s.npu_begin, span_args(i)));
    }
    for (const ProfiledComm& c : h.comms_) {
      const std::string name = comm_name(c);
      if (h.opts_.with_cpu)
        ev.push_back(complete(name, "comm", pid, kCpuTrack, c.host_begin, c.host_end - c.host_begin, comm_args(c)));
      ev.push_back(complete(name, "comm", pid, kCommTrack, c.npu_begin, c.npu_end - c.npu_begin, comm_args(c)));
    }
    for (const MemorySample& m : h.memory_) {
      ev.push_back(json{{"name", "memory"},
                        {"ph", "C"},
                        {"pid", pid},
                        {"ts", m.t},
                        {"args", {{"allocated", m.allocated}, {"reserved", m.reserved}}}});
      json cats = json::object();
      for (int c = 0; c < static_cast<int>(device::MemCategory::kCount); ++c)
        cats[device::mem_category_name(static_cast<device::MemCategory>(c))] = m.by_category[c];
      ev.push_back(json{{"name", "memory by category"}, {"ph", "C"}, {"pid", pid}, {"ts", m.t}, {"args", cats}});
    }
    json md{{"rank", h.rank_},
            {"world_size", h.state_ ? h.state_->world_size() : 1},
            {"iterations", {h.window_first_, h.window_last_}},
            {"level", h.opts_.level_name},
            {"with_cpu", h.opts_.with_cpu},
            {"device", h.dev_.profile().name},
            {"clock", "steady_clock microseconds; shared by the processes of one host only"},
            {"npu", "simulated: roofline kernels and ring collectives (device/cost_model.h)"}};
    return json{{"traceEvents", std::move(ev)}, {"displayTimeUnit", "ms"}, {"metadata", std::move(md)}};
  }

  // Top ops by self time (host wall time): self = duration minus children.
  std::string summary() const {
    struct Row {
      int64_t calls = 0;
      double total = 0, self = 0;
    };
    std::vector<double> child(h.spans_.size(), 0.0);
    for (const ProfiledSpan& s : h.spans_)
      if (s.parent >= 0) child[s.parent] += s.host_end - s.host_begin;
    std::map<std::string, Row> rows;
    double step_us = 0, comm_us = 0, npu_comm = 0;
    for (int32_t i = 0; i < static_cast<int32_t>(h.spans_.size()); ++i) {
      const ProfiledSpan& s = h.spans_[i];
      const double dur = s.host_end - s.host_begin;
      if (s.kind == profiler::Kind::kIteration) step_us += dur;
      const std::string key = s.kind == profiler::Kind::kIteration ? "iteration" : std::string(s.name);
      Row& r = rows[key];
      r.calls++;
      r.total += dur;
      r.self += dur - child[i];
    }
    for (const ProfiledComm& c : h.comms_) {
      comm_us += c.host_end - c.host_begin;
      npu_comm += c.npu_end - c.npu_begin;
      Row& r = rows[comm_name(c)];
      r.calls++;
      r.total += c.host_end - c.host_begin;
    }
    std::vector<std::pair<std::string, Row>> sorted(rows.begin(), rows.end());
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second.self > b.second.self; });
    std::string out = fmt::format("profile of rank {}, iterations {}..{} ({}), host wall time\n", h.rank_,
                                  h.window_first_, h.window_last_, h.opts_.level_name);
    out += fmt::format("{:<40} {:>8} {:>12} {:>12} {:>8}\n", "name", "calls", "self ms", "total ms", "% step");
    const size_t top = std::min<size_t>(sorted.size(), 20);
    for (size_t i = 0; i < top; ++i) {
      const auto& [name, r] = sorted[i];
      out += fmt::format("{:<40} {:>8} {:>12.3f} {:>12.3f} {:>7.1f}%\n", name.substr(0, 40), r.calls, r.self / 1e3,
                         r.total / 1e3, step_us > 0 ? 100.0 * r.self / step_us : 0.0);
    }
    out += fmt::format(
        "step time {:.3f} ms over {} iteration(s); communication {:.3f} ms ({:.1f}%), compute and "
        "the rest {:.3f} ms\n",
        step_us / 1e3, h.window_last_ - h.window_first_ + 1, comm_us / 1e3,
        step_us > 0 ? 100.0 * comm_us / step_us : 0.0, (step_us - comm_us) / 1e3);
    out += fmt::format("simulated NPU: kernels {:.3f} ms, communication {:.3f} ms (device busy {:.1f}% of the step)\n",
                       h.npu_kernel_us_ / 1e3, npu_comm / 1e3,
                       step_us > 0 ? 100.0 * (h.npu_kernel_us_ + npu_comm) / step_us : 0.0);
    return out;
  }
};

void ProfilerHook::save() {
  window_open_ = false;
  action_ = profiler::ScheduleAction::kNone;
  written_.clear();
  const std::string dir = opts_.save_path;
  // A schedule that repeats writes each cycle's files (as PyTorch's
  // on_trace_ready is called per cycle): rank_0_trace_cycle2.json, ...
  ++cycles_saved_;
  const std::string cycle = opts_.schedule.repeat == 1 ? "" : fmt::format("_cycle{}", cycles_saved_);
  // A profile that cannot be written costs the profile, not the run: each
  // failure is a warning, and every rank still reaches the barrier (a rank
  // leaving early would hang the others in the next collective).
  if (profiled_) {
    try {
      fs_.create_dirs(dir);
      const TraceWriter w{*this};
      const std::string trace_path = fmt::format("{}/rank_{}_trace{}.json", dir, rank_, cycle);
      write_file_atomic(fs_, trace_path, w.trace().dump());
      const std::string summary = w.summary();
      const std::string summary_path = fmt::format("{}/rank_{}_summary{}.txt", dir, rank_, cycle);
      write_file_atomic(fs_, summary_path, summary);
      written_ = {trace_path, summary_path};
      if (opts_.print_summary) {
        std::string prefixed;
        for (size_t s = 0; s < summary.size();) {
          const size_t e = summary.find('\n', s);
          prefixed += fmt::format("[rank {}] {}\n", rank_, summary.substr(s, e - s));
          s = e == std::string::npos ? summary.size() : e + 1;
        }
        fmt::print("{}", prefixed);
      }
    } catch (const std::exception& e) {
      fmt::print(stderr, "mtrain: warning: profiler: rank {} could not write its trace to {}: {} (training goes on)\n",
                 rank_, dir, e.what());
    }
  }
  // Every rank, profiled or not, reaches the barrier; then the lowest
  // profiled rank merges the per-rank files (one host, or a shared file system).
  if (state_) state_->world().barrier();
  if (profiled_ && rank_ == profiled_ranks_.front()) {
    try {
      json merged = json::array();
      for (int r : profiled_ranks_) {
        const std::string p = fmt::format("{}/rank_{}_trace{}.json", dir, r, cycle);
        json t = json::parse(fs_.read_file(p, int64_t{1} << 40));
        for (auto& e : t["traceEvents"]) merged.push_back(std::move(e));
      }
      const std::string merged_path = fmt::format("{}/merged_trace{}.json", dir, cycle);
      json doc{{"traceEvents", std::move(merged)},
               {"displayTimeUnit", "ms"},
               {"metadata",
                {{"ranks", profiled_ranks_},
                 {"iterations", {window_first_, window_last_}},
                 {"clock", "steady_clock microseconds: one time base on one host; across nodes approximate"}}}};
      write_file_atomic(fs_, merged_path, doc.dump());
      written_.push_back(merged_path);
    } catch (const std::exception& e) {
      fmt::print(stderr,
                 "mtrain: warning: profiler: no merged trace: {} (the per-rank traces stand; on several nodes "
                 "give --profile_save_path a file system all nodes share)\n",
                 e.what());
    }
  }
  if (profiled_ && !opts_.quiet && !written_.empty())
    fmt::print("[profiler] rank {}: iterations {}..{} written to {}\n", rank_, window_first_, window_last_,
               fmt::join(written_, ", "));
  std::fflush(stdout);
  discard_recording();
}

}  // namespace mtrain::observe
