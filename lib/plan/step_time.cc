#include "plan/step_time.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "common/errors.h"
#include "parallel/pipeline_schedule.h"
#include "plan/dry_run.h"

namespace mtrain::plan {

double megatron_flops_per_iteration(const model::ModelConfig& c, int64_t global_batch, int64_t seq_length) {
  const double B = static_cast<double>(global_batch), s = static_cast<double>(seq_length);
  const double L = static_cast<double>(c.num_layers), h = static_cast<double>(c.hidden);
  const double a = static_cast<double>(c.heads), g = static_cast<double>(c.groups);
  const double query_ratio = a * static_cast<double>(c.head_dim) / h;
  const double gated = c.swiglu ? 1.5 : 1.0;
  return 12.0 * B * s * L * h * h *
         ((1.0 + g / a + s / h) * query_ratio + static_cast<double>(c.ffn) / h * gated +
          static_cast<double>(c.padded_vocab) / (2.0 * L * h));
}

namespace {

bool is_microbatch_phase(const PhaseRecord& p) { return p.name == "forward_step" || p.name == "backward_step"; }

}  // namespace

RecordCost record_cost(const StepRecord& r, const device::CostModel& cost, bool sixteen_bit,
                       const std::function<bool(std::string_view)>& inter_node) {
  RecordCost c;
  c.phase_s.assign(r.phases.size(), 0.0);
  for (const KernelRecord& k : r.kernels) {
    const double t = cost.kernel_seconds(k.flops, k.bytes, sixteen_bit);
    if (k.phase >= 0 && is_microbatch_phase(r.phases[k.phase])) {
      c.compute_s += t;
      c.phase_s[k.phase] += t;
    } else {
      c.optimizer_s += t;
    }
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
      // The distributed optimizer's param all-gather: the optimizer phase's only all-gather.
      if (m.op == parallel::CommOp::kAllGather && m.phase >= 0 && r.phases[m.phase].name == "optimizer_step")
        c.param_gather_s += t;
    }
  }
  return c;
}

namespace {

// (op, micro-batch, virtual stage) of a pipeline action.
using ActionKey = std::tuple<int, int, int>;

// Every stage plays its pipeline_actions order on its own clock; an action
// starts once its stage is free and the action it needs (the previous
// virtual stage's forward, the next one's backward) has ended, plus one
// pipeline message when that ran on another stage.
struct PipelineSim {
  int stages, chunks, microbatches;
  double p2p_s;
  std::vector<std::map<ActionKey, double>> duration;  // per stage

  std::vector<std::pair<double, double>> run(std::vector<TimelineSpan>* timeline) const {  // per stage: (end, busy)
    std::vector<std::vector<parallel::PipeAction>> order(stages);
    for (int s = 0; s < stages; ++s) order[s] = parallel::pipeline_actions({stages, s, chunks, microbatches});
    std::map<ActionKey, double> done;
    std::vector<size_t> next(stages, 0);
    std::vector<std::pair<double, double>> clock(stages, {0.0, 0.0});
    const int last_virtual = stages * chunks - 1;
    for (bool progress = true; progress;) {
      progress = false;
      for (int s = 0; s < stages; ++s) {
        for (; next[s] < order[s].size(); ++next[s]) {
          const parallel::PipeAction& a = order[s][next[s]];
          const int op = a.op == parallel::PipeOp::kForward ? 0 : 1, v = a.chunk * stages + s;
          double ready = 0;
          const int dep_v = op == 0 ? v - 1 : v + 1;
          if (dep_v >= 0 && dep_v <= last_virtual) {
            auto it = done.find({op, a.microbatch, dep_v});
            if (it == done.end()) break;
            ready = it->second + (dep_v % stages != s ? p2p_s : 0.0);
          }
          const double d = duration[s].at({op, a.microbatch, v});
          const double begin = std::max(clock[s].first, ready);
          timeline->push_back({s, op == 0 ? "forward" : "backward", a.microbatch, a.chunk, begin, begin + d});
          clock[s].first = begin + d;
          clock[s].second += d;
          done[{op, a.microbatch, v}] = clock[s].first;
          progress = true;
        }
      }
    }
    for (int s = 0; s < stages; ++s)
      if (next[s] != order[s].size()) throw Error(ExitCode::kInternal, "pipeline simulation made no progress");
    return clock;
  }
};

}  // namespace

StepTime step_time(const DryRun& r) {
  const device::CostModel cost(r.profile);
  const bool sixteen = r.whole_model.dtype != DType::kF32;
  PipelineSim sim{r.pp, r.chunks, r.microbatches, 0.0, std::vector<std::map<ActionKey, double>>(r.pp)};
  std::vector<StageTime> stages(r.pp);
  for (const ClassMemory& k : r.classes) {
    const auto spans = [&](std::string_view g) {
      for (const auto& [name, inter] : k.group_spans_nodes)
        if (name == g) return inter;
      return false;
    };
    const RecordCost c = record_cost(k.step, cost, sixteen, spans);
    StageTime& st = stages[k.rank_class.stage];
    st.stage = k.rank_class.stage;
    // A stage's DP shards differ only in their optimizer share: the slowest stands for the stage.
    st.compute_s = std::max(st.compute_s, c.compute_s);
    st.tp_comm_s = std::max(st.tp_comm_s, c.phase_comm_s);
    st.tail_comm_s = std::max(st.tail_comm_s, c.tail_comm_s);
    st.optimizer_s = std::max(st.optimizer_s, c.optimizer_s);
    st.param_gather_s = std::max(st.param_gather_s, c.param_gather_s);
    sim.p2p_s = std::max(sim.p2p_s, c.p2p_message_s);
    for (size_t i = 0; i < k.step.phases.size(); ++i) {
      const PhaseRecord& p = k.step.phases[i];
      if (!is_microbatch_phase(p)) continue;
      const ActionKey key{p.name == "forward_step" ? 0 : 1, p.microbatch, p.chunk * r.pp + st.stage};
      double& d = sim.duration[st.stage][key];
      d = std::max(d, c.phase_s[i]);
    }
  }
  StepTime t;
  const auto clocks = sim.run(&t.timeline);
  for (int s = 0; s < r.pp; ++s) {
    const StageTime& st = stages[s];
    double at = clocks[s].first;
    // After the last backward: DP/grad collectives, the optimizer, then the param all-gather.
    for (const auto& [name, d] :
         {std::pair{"DP/grad communication", st.tail_comm_s - st.param_gather_s},
          std::pair{"optimizer step", st.optimizer_s}, std::pair{"param all-gather", st.param_gather_s}}) {
      if (d > 0) t.timeline.push_back({s, name, -1, 0, at, at + d});
      at += d;
    }
    stages[s].end_s = clocks[s].first;
    stages[s].busy_s = clocks[s].second;
    t.step_s = std::max(t.step_s, at);
  }
  // Idle share; clamped at 0 against rounding when a stage never waits.
  for (StageTime& st : stages)
    st.bubble = t.step_s > 0 ? std::max(0.0, (t.step_s - st.busy_s - st.tail_comm_s - st.optimizer_s) / t.step_s) : 0.0;
  t.stages = stages;
  const double world = static_cast<double>(r.world_size);
  if (t.step_s > 0) {
    t.tokens_per_s_per_device = static_cast<double>(r.global_batch * r.seq_length) / t.step_s / world;
    t.tflops_per_device =
        megatron_flops_per_iteration(r.whole_model, r.global_batch, r.seq_length) / t.step_s / world / 1e12;
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
    out += fmt::format(
        "  pipeline stage {}: compute {:.1f} ms, TP communication {:.1f} ms, DP/grad communication {:.1f} ms, "
        "bubble {:.1f}%\n",
        s.stage, s.compute_s * 1e3, s.tp_comm_s * 1e3, s.tail_comm_s * 1e3, 100.0 * s.bubble);
    out += fmt::format("    optimizer step {:.1f} ms (overflow check, grad norm, update, main-to-model param copy)\n",
                       s.optimizer_s * 1e3);
  }
  const bool sixteen = r.whole_model.dtype != DType::kF32;
  out +=
      fmt::format("  per device: {:.1f} tokens/s, {:.1f} TFLOP/s (Megatron's formula), MFU {:.1f}% of {:.1f} TFLOP/s\n",
                  t.tokens_per_s_per_device, t.tflops_per_device, 100.0 * t.mfu,
                  sixteen ? r.profile.peak_tflops_16bit : r.profile.peak_tflops_fp32);
  out += "  (not modelled: DP communication overlapped with backward; no kernel or collective overlaps another)\n";
  return out;
}

}  // namespace mtrain::plan
