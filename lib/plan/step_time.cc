#include "plan/step_time.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "common/errors.h"
#include "device/device_clock.h"
#include "model/flops.h"
#include "parallel/comm.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/process_grid.h"
#include "plan/dry_run.h"

namespace mtrain::plan {

namespace {

// (op, micro-batch, virtual stage) of a pipeline action.
using ActionKey = std::tuple<int, int, int>;

// Every stage plays its pipeline_actions order on its own clock; an action
// starts once its stage is free and the action it needs (the previous
// virtual stage's forward, the next one's backward) has ended, plus one
// pipeline message when that ran on another stage. bucket_ready[stage][chunk]:
// when each overlapped parameter gather the first forward of that chunk
// reads arrives, in the order it reads them; as Megatron's forward pre-hooks
// wait per bucket, the forward runs in as many equal parts, each once its
// bucket is there.
struct PipelineSim {
  int stages, chunks, microbatches;
  double p2p_s;
  std::vector<std::map<ActionKey, double>> duration;           // per stage
  std::vector<std::vector<std::vector<double>>> bucket_ready;  // (stages, chunks, buckets)

  std::vector<std::pair<double, double>> run(std::vector<TimelineSpan>* timeline) const {  // per stage: (end, busy)
    std::vector<std::vector<parallel::PipeAction>> order(stages);
    for (int s = 0; s < stages; ++s) order[s] = parallel::pipeline_actions({stages, s, chunks, microbatches});
    std::map<ActionKey, double> done;
    std::vector<size_t> next(stages, 0);
    std::vector<device::DeviceClock> dev(stages);  // each stage's compute stream
    std::vector<double> busy(stages, 0.0);
    const int last_virtual = stages * chunks - 1;
    for (bool progress = true; progress;) {
      progress = false;
      for (int s = 0; s < stages; ++s) {
        for (; next[s] < order[s].size(); ++next[s]) {
          const parallel::PipeAction& a = order[s][next[s]];
          const int op = a.op == parallel::PipeOp::kForward ? 0 : 1, v = a.chunk * stages + s;
          double ready = 0.0;
          const int dep_v = op == 0 ? v - 1 : v + 1;
          if (dep_v >= 0 && dep_v <= last_virtual) {
            auto it = done.find({op, a.microbatch, dep_v});
            if (it == done.end()) break;
            ready = std::max(ready, it->second + (dep_v % stages != s ? p2p_s : 0.0));
          }
          const double d = duration[s].at({op, a.microbatch, v});
          const double begin = dev[s].place(device::Stream::kCompute, ready, d);
          const std::vector<double>& buckets = bucket_ready[s][a.chunk];
          if (op == 0 && a.microbatch == 0 && !buckets.empty()) {
            double end = begin;
            for (double arrives : buckets) end = std::max(end, arrives) + d / static_cast<double>(buckets.size());
            dev[s].wait_until(device::Stream::kCompute, end);
          }
          const double end = dev[s].free_at(device::Stream::kCompute);
          timeline->push_back({s, op == 0 ? "forward" : "backward", a.microbatch, a.chunk, begin, end});
          busy[s] += d;
          done[{op, a.microbatch, v}] = end;
          progress = true;
        }
      }
    }
    for (int s = 0; s < stages; ++s)
      if (next[s] != order[s].size()) throw Error(ExitCode::kInternal, "pipeline simulation made no progress");
    std::vector<std::pair<double, double>> out;
    for (int s = 0; s < stages; ++s) out.emplace_back(dev[s].free_at(device::Stream::kCompute), busy[s]);
    return out;
  }
};

// The overlapped collectives of one rank class on its stage's DP
// communication stream: the parameter gathers from the step's start, then
// each gradient bucket from where backward started it.
struct CommStream {
  std::vector<double> gather_end;  // per gather, in start order
  double reduce_end = 0;           // the last gradient bucket's end (0: none)
  double reduced_s = 0;            // gradient buckets' total time
  std::vector<TimelineSpan> spans;
};

// begin_of(phase index): the phase's begin on the stage's pipeline clock.
CommStream play_comm_stream(const RecordCost& c, int stage, double backward_end,
                            const std::function<double(int)>& begin_of) {
  CommStream out;
  device::DeviceClock dev;
  const auto comm = device::Stream::kComm;
  for (const OverlappedComm& o : c.overlapped) {
    if (!o.param_gather) continue;
    const double begin = dev.place(comm, 0.0, o.duration_s);
    out.spans.push_back({stage, "DP param all-gather", -1, 0, begin, dev.free_at(comm), true});
    out.gather_end.push_back(dev.free_at(comm));
  }
  for (const OverlappedComm& o : c.overlapped) {
    if (o.param_gather) continue;
    const double ready = std::isnan(begin_of(o.phase)) ? backward_end : begin_of(o.phase) + o.offset_s;
    const double begin = dev.place(comm, ready, o.duration_s);
    out.spans.push_back({stage, "DP grad reduce bucket", -1, 0, begin, dev.free_at(comm), true});
    out.reduce_end = dev.free_at(comm);
    out.reduced_s += o.duration_s;
  }
  return out;
}

}  // namespace
namespace {

struct ClassCost {
  const ClassMemory* k;
  RecordCost cost;
};

// Every class's cost folded into its stage (a stage's DP shards differ only in
// their optimizer share: the slowest stands for the stage) and the pipeline's
// phase durations and gather waits.
std::vector<ClassCost> stage_costs(const DryRun& r, PipelineSim& sim, std::vector<StageTime>& stages) {
  const device::CostModel cost(r.profile);
  const bool sixteen = r.whole_model.dtype != DType::kF32;
  std::vector<ClassCost> out;
  for (const ClassMemory& k : r.classes) {
    const auto nodes = [&](std::string_view g) { return parallel::ProcessGrid::nodes_of(k.group_nodes, g); };
    const RecordCost c = record_cost(k.step, cost, sixteen, nodes, r.overlap);
    StageTime& st = stages[k.rank_class.stage];
    st.stage = k.rank_class.stage;
    st.compute_s = std::max(st.compute_s, c.compute_s);
    st.host_wait_s = std::max(st.host_wait_s, c.host_wait_s);
    if (c.phase_comm_s >= st.tp_comm_s + st.cp_comm_s + st.ep_comm_s) {  // the class with the most, split
      st.tp_comm_s = c.phase_line_s[0];
      st.cp_comm_s = c.phase_line_s[1];
      st.ep_comm_s = c.phase_line_s[2];
      st.phase_hidden_s = c.phase_hidden_s;
    }
    st.tail_comm_s = std::max(st.tail_comm_s, c.tail_comm_s);
    st.optimizer_s = std::max(st.optimizer_s, c.optimizer_s);
    st.param_gather_s = std::max(st.param_gather_s, c.param_gather_s);
    st.dp_comm_s = std::max(st.dp_comm_s, c.dp_comm_s);
    st.overlapped_s = std::max(st.overlapped_s, c.dp_comm_s - c.dp_blocking_s);
    sim.p2p_s = std::max(sim.p2p_s, c.p2p_message_s);
    for (size_t i = 0; i < k.step.phases.size(); ++i) {
      const PhaseRecord& p = k.step.phases[i];
      if (!observe::is_microbatch_phase(p)) continue;
      const ActionKey key{p.name == "forward_step" ? 0 : 1, p.microbatch, p.chunk * r.pp + st.stage};
      double& d = sim.duration[st.stage][key];
      d = std::max(d, c.phase_s[i]);
    }
    // The gathers each chunk's first forward reads: those of its prefix
    // (StepRecord::gathers_before_chunk) not read by an earlier chunk.
    const std::vector<double> gathers = play_comm_stream(c, st.stage, 0, [](int) { return 0.0; }).gather_end;
    size_t read = 0;
    for (int ch = 0; ch < r.chunks && !gathers.empty(); ++ch) {
      const size_t n = k.step.gathers_before_chunk.empty() ? gathers.size()
                                                           : static_cast<size_t>(k.step.gathers_before_chunk.at(ch));
      std::vector<double>& ready = sim.bucket_ready[st.stage][ch];
      if (n > read) {
        std::vector<double> mine(gathers.begin() + static_cast<std::ptrdiff_t>(read),
                                 gathers.begin() + static_cast<std::ptrdiff_t>(n));
        if (mine.size() > ready.size()) ready.resize(mine.size(), 0.0);
        for (size_t j = 0; j < mine.size(); ++j) ready[j] = std::max(ready[j], mine[j]);
        read = n;
      }
    }
    out.push_back({&k, c});
  }
  return out;
}

// Per stage: how far its overlapped gradient reduction runs past its last
// backward, and that stream's spans (of the class that ends latest).
std::vector<double> exposed_reduction(const DryRun& r, const std::vector<ClassCost>& costs,
                                      const std::vector<std::pair<double, double>>& clocks, StepTime& t) {
  std::map<std::tuple<int, int, int, int>, double> begin;  // (stage, op, micro-batch, chunk) -> begin
  for (const TimelineSpan& sp : t.timeline)
    begin[{sp.stage, sp.name == "forward" ? 0 : 1, sp.microbatch, sp.chunk}] = sp.begin_s;
  std::vector<double> exposed(r.pp, -1.0);
  std::vector<std::vector<TimelineSpan>> spans(r.pp);
  for (const ClassCost& cc : costs) {
    const int s = cc.k->rank_class.stage;
    const auto begin_of = [&](int phase) {
      if (phase < 0 || !is_microbatch_phase(cc.k->step.phases[phase])) return std::nan("");
      const PhaseRecord& p = cc.k->step.phases[phase];
      return begin.at({s, p.name == "forward_step" ? 0 : 1, p.microbatch, p.chunk});
    };
    CommStream cs = play_comm_stream(cc.cost, s, clocks[s].first, begin_of);
    const double e = cs.reduce_end > 0 ? std::max(0.0, cs.reduce_end - clocks[s].first) : 0.0;
    if (e > exposed[s]) {
      exposed[s] = e;
      spans[s] = std::move(cs.spans);
    }
  }
  for (int s = 0; s < r.pp; ++s) {
    exposed[s] = std::max(0.0, exposed[s]);
    t.timeline.insert(t.timeline.end(), spans[s].begin(), spans[s].end());
  }
  return exposed;
}

}  // namespace

StepTime step_time(const DryRun& r) {
  PipelineSim sim{r.pp,
                  r.chunks,
                  r.microbatches,
                  0.0,
                  std::vector<std::map<ActionKey, double>>(r.pp),
                  std::vector<std::vector<std::vector<double>>>(r.pp, std::vector<std::vector<double>>(r.chunks))};
  std::vector<StageTime> stages(r.pp);
  const std::vector<ClassCost> costs = stage_costs(r, sim, stages);
  StepTime t;
  const auto clocks = sim.run(&t.timeline);
  // The delay the parameter gathers add: the same pipeline without them.
  PipelineSim free = sim;
  for (auto& row : free.bucket_ready)
    for (auto& chunk : row) chunk.clear();
  std::vector<TimelineSpan> unused;
  const auto free_clocks = free.run(&unused);
  const std::vector<double> exposed = exposed_reduction(r, costs, clocks, t);
  for (int s = 0; s < r.pp; ++s) {
    StageTime& st = stages[s];
    const double gather_delay = std::max(0.0, clocks[s].first - free_clocks[s].first);
    const double dp_blocking = st.dp_comm_s - st.overlapped_s;
    st.dp_exposed_s = dp_blocking + exposed[s] + gather_delay;
    const int units = r.profile.compute_units, taken = r.profile.dp_comm_units;
    if (units > 0 && taken > 0 && taken < units)
      st.contention_s = std::max(0.0, st.dp_comm_s - st.dp_exposed_s) * (static_cast<double>(taken) / (units - taken));
    // After the last backward (and the exposed part of the overlapped
    // reduction): the blocking collectives, the optimizer, then the
    // distributed optimizer's blocking param all-gather.
    double at = clocks[s].first + exposed[s] + st.contention_s;
    for (const auto& [name, d] :
         {std::pair{"communication after backward", st.tail_comm_s - st.param_gather_s},
          std::pair{"optimizer step", st.optimizer_s}, std::pair{"param all-gather", st.param_gather_s}}) {
      if (d > 0) t.timeline.push_back({s, name, -1, 0, at, at + d});
      at += d;
    }
    st.end_s = clocks[s].first;
    st.busy_s = clocks[s].second;
    t.step_s = std::max(t.step_s, at);
  }
  // Idle share; clamped at 0 against rounding when a stage never waits.
  for (size_t s = 0; s < stages.size(); ++s) {
    StageTime& st = stages[s];
    const double used = st.busy_s + st.tail_comm_s + st.optimizer_s + exposed[s] + st.contention_s;
    st.bubble = t.step_s > 0 ? std::max(0.0, (t.step_s - used) / t.step_s) : 0.0;
  }
  t.stages = stages;
  const bool sixteen = r.whole_model.dtype != DType::kF32;
  const double world = static_cast<double>(r.world_size);
  if (t.step_s > 0) {
    // Tokens and Megatron's FLOPs of the step: every row at the sequence length, or (SFT data) the
    // rows of DP rank 0's micro-batches at their own lengths, for every DP rank.
    double tokens = static_cast<double>(r.global_batch * r.seq_length);
    double flops = model::megatron_flops_per_iteration(r.whole_model, r.global_batch, r.seq_length);
    if (!r.data_lengths.empty()) {
      const int64_t rows = r.global_batch / (static_cast<int64_t>(r.dp) * r.microbatches);
      tokens = flops = 0;
      for (int64_t T : r.data_lengths) {
        tokens += static_cast<double>(r.dp * rows * T);
        flops += model::megatron_flops_per_iteration(r.whole_model, r.dp * rows, T);
      }
    }
    t.tokens_per_s_per_device = tokens / t.step_s / world;
    t.tflops_per_device = flops / t.step_s / world / 1e12;
    const double peak = sixteen ? r.profile.peak_tflops_16bit : r.profile.peak_tflops_fp32;
    t.mfu = peak > 0 ? t.tflops_per_device / peak : 0.0;
  }
  return t;
}

std::string time_report(const DryRun& r, const StepTime& t) {
  std::string out =
      fmt::format("Simulated step time on {} (cost model, the pipeline schedule on the device clock): {:.1f} ms\n",
                  r.profile.name, t.step_s * 1e3);
  for (const StageTime& s : t.stages) {
    // CP and EP lines where the layout has them (an MoE model's dispatch even at EP 1: its ETP exchange).
    std::string phase_comm = fmt::format("TP communication {:.1f} ms", s.tp_comm_s * 1e3);
    if (r.cp > 1) phase_comm += fmt::format(", CP communication {:.1f} ms", s.cp_comm_s * 1e3);
    if (r.whole_model.moe.num_experts > 0)
      phase_comm += fmt::format(", EP communication (expert dispatch) {:.1f} ms", s.ep_comm_s * 1e3);
    out += fmt::format(
        "  pipeline stage {}: compute {:.1f} ms, {}, DP communication {:.1f} ms "
        "({:.1f} ms exposed, {:.1f} ms hidden behind compute), other communication after backward {:.1f} ms, bubble "
        "{:.1f}%\n",
        s.stage, s.compute_s * 1e3, phase_comm, s.dp_comm_s * 1e3, s.dp_exposed_s * 1e3,
        std::max(0.0, s.dp_comm_s - s.dp_exposed_s) * 1e3, s.other_comm_s() * 1e3, 100.0 * s.bubble);
    if (s.phase_hidden_s > 0)
      out += fmt::format(
          "    micro-batch collectives beside the kernels (CP ring passes, --tp_comm_overlap): {:.1f} ms hidden, "
          "not in the lines above\n",
          s.phase_hidden_s * 1e3);
    if (s.contention_s > 0)
      out += fmt::format(
          "    contention: the kernels beside the overlapped DP collectives lost {} of {} units to them: {:.1f} ms\n",
          r.profile.dp_comm_units, r.profile.compute_units, s.contention_s * 1e3);
    if (s.host_wait_s > 0)
      out += fmt::format(
          "    host-bound: the device waited {:.1f} ms for the host to issue its kernels ({:.1f} us per op{})\n",
          s.host_wait_s * 1e3, r.profile.cost.host_dispatch_s * 1e6,
          r.profile.task_queue_enable >= 0 ? fmt::format(" at TASK_QUEUE_ENABLE={}", r.profile.task_queue_enable)
                                           : std::string());
    out += fmt::format("    optimizer step {:.1f} ms (overflow check, grad norm, update, main-to-model param copy)\n",
                       s.optimizer_s * 1e3);
  }
  const bool sixteen = r.whole_model.dtype != DType::kF32;
  out +=
      fmt::format("  per device: {:.1f} tokens/s, {:.1f} TFLOP/s (Megatron's formula), MFU {:.1f}% of {:.1f} TFLOP/s\n",
                  t.tokens_per_s_per_device, t.tflops_per_device, 100.0 * t.mfu,
                  sixteen ? r.profile.peak_tflops_16bit : r.profile.peak_tflops_fp32);
  out +=
      "  (communication beside compute (--overlap_grad_reduce, --overlap_param_gather, the CP ring, "
      "--tp_comm_overlap) shares no bandwidth with the kernels; of the compute it takes only the units a "
      "--tp_comm_overlap reduce-scatter takes from its GEMM)\n";
  return out;
}

}  // namespace mtrain::plan
