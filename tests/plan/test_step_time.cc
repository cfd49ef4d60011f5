// The step-time arithmetic of a dry run against published formulas: the
// pipeline simulation against the 1F1B and interleaved bubble formulas of Narayanan et al. 2021
// (step = (m + (p - 1) / v) (t_f + t_b) for uniform stages, no message time).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "plan/dry_run.h"
#include "plan/sim_trace.h"
#include "plan/step_time.h"

namespace mtrain::plan {
namespace {

// A kernel the cost model prices by its roofline (flops and bytes, no shape).
KernelWork work(double flops, double bytes) { return {KernelKind::kMemory, flops, bytes}; }

// A synthetic plan: every stage's forward of one micro-batch through one
// chunk is one kernel of `fwd` FLOPs, its backward one of 2 fwd.
DryRun uniform_pipeline(int p, int v, int m, double fwd) {
  DryRun r;
  r.pp = p;
  r.chunks = v;
  r.microbatches = m;
  r.world_size = p;
  r.global_batch = m;
  r.seq_length = 1;
  r.whole_model.dtype = DType::kBF16;
  for (int s = 0; s < p; ++s) {
    ClassMemory k;
    k.rank_class.stage = s;
    k.rank_class.representative = s;
    k.rank_class.ranks = {s};
    for (int c = 0; c < v; ++c)
      for (int mb = 0; mb < m; ++mb)
        for (const char* name : {"forward_step", "backward_step"}) {
          const bool f = std::string(name) == "forward_step";
          k.step.kernels.push_back({"gemm", work(f ? fwd : 2 * fwd, 0), static_cast<int>(k.step.phases.size())});
          k.step.phases.push_back({name, mb, c});
        }
    r.classes.push_back(k);
  }
  return r;
}

TEST(PipelineSimulation, OneFOneBBubbleIsPMinusOneSlots) {
  const int p = 4, m = 8;
  const DryRun r = uniform_pipeline(p, 1, m, 1e12);
  const device::CostModel cm(r.profile);
  const double tf = cm.kernel_seconds(1e12, 0, true), tb = cm.kernel_seconds(2e12, 0, true);
  const StepTime t = step_time(r);
  const double expect = (m + p - 1) * (tf + tb);
  EXPECT_NEAR(t.step_s, expect, 1e-12 * expect);
  EXPECT_NEAR(t.stages[0].bubble, (p - 1.0) / (m + p - 1.0), 1e-12);
}

// An MoE dispatch in a forward step: the all-to-all is priced by the cost
// model (910B3 full mesh inside a node, RoCE across) and waited for like
// the TP collectives. 32 MB each way over EP = 4: D/4 = 8 MB on each HCCS
// link at 28 GB/s · 0.65; across nodes 3/4 · 32 MB at 25 GB/s · 0.9; + 10 µs.
TEST(StepTime, AllToAllInAMicroBatchIsOnTheCriticalPath) {
  for (const bool spans_nodes : {false, true}) {
    DryRun r = uniform_pipeline(1, 1, 1, 1e12);
    const device::CostModel cm(r.profile);
    const double compute = cm.kernel_seconds(1e12, 0, true) + cm.kernel_seconds(2e12, 0, true);
    CommRecord dispatch;
    dispatch.op = parallel::CommOp::kAllToAll;
    dispatch.group = "ep";
    dispatch.group_size = 4;
    dispatch.bytes = dispatch.recv_bytes = 32000000;
    dispatch.phase = 0;
    dispatch.kernels_before = 1;
    r.classes[0].step.comms.push_back(dispatch);
    r.classes[0].group_nodes = {{"ep", spans_nodes ? 4 : 1}};  // across nodes: one member on each
    const double a2a = (spans_nodes ? 0.75 * 32e6 / 22.5e9 : 8e6 / 18.2e9) + 10e-6;
    const StepTime t = step_time(r);
    EXPECT_NEAR(t.stages[0].ep_comm_s, a2a, 1e-12) << spans_nodes;
    EXPECT_NEAR(t.step_s, compute + a2a, 1e-12) << spans_nodes;
  }
}

TEST(PipelineSimulation, InterleavedBubbleShrinksByTheChunkCount) {
  const int p = 4, v = 2, m = 8;
  const DryRun r = uniform_pipeline(p, v, m, 0.5e12);
  const device::CostModel cm(r.profile);
  const double tf = v * cm.kernel_seconds(0.5e12, 0, true), tb = v * cm.kernel_seconds(1e12, 0, true);
  const StepTime t = step_time(r);
  const double expect = (m + (p - 1.0) / v) * (tf + tb);
  EXPECT_NEAR(t.step_s, expect, 1e-12 * expect);
}

// --overlap_grad_reduce by hand: one stage, one micro-batch; forward one
// kernel, backward two equal kernels (t each). Bucket 0's reduce-scatter
// starts after the first backward kernel, bucket 1's only after backward
// (GradSync's finish). On the DP stream: bucket 0 runs [2t, 2t + d0], bucket 1
// from max(3t, 2t + d0); exposed = max(0, comm_end - backward_end).
struct OverlapCase {
  DryRun r;
  double t = 0, d0 = 0, d1 = 0, dg = 0;
};

OverlapCase overlap_case(bool overlapped, bool gather) {
  OverlapCase c;
  DryRun& r = c.r;
  r.pp = r.chunks = r.microbatches = 1;
  r.world_size = r.dp = 2;
  r.global_batch = r.seq_length = 1;
  r.whole_model.dtype = DType::kBF16;
  const device::CostModel cm(r.profile);
  c.t = cm.kernel_seconds(1e12, 0, true);
  const auto rs = [&](int64_t bytes) { return cm.comm_seconds(device::Collective::kReduceScatter, bytes, {2, 1}); };
  int64_t b0 = 1 << 20;
  while (rs(b0) < 1.5 * c.t) b0 *= 2;  // bucket 0 outlasts the rest of backward
  c.d0 = rs(b0);
  c.d1 = rs(b0 / 4);
  ClassMemory k;
  k.rank_class.ranks = {0, 1};
  k.step.phases = {{"forward_step", 0, 0}, {"backward_step", 0, 0}, {"grad_sync", -1, 0}, {"optimizer_step", -1, 0}};
  k.step.kernels = {{"gemm", work(1e12, 0), 0}, {"gemm", work(1e12, 0), 1}, {"gemm", work(1e12, 0), 1}};
  const auto bucket = [&](int64_t bytes, int phase, int64_t before) {
    CommRecord m;
    m.op = parallel::CommOp::kReduceScatter;
    m.group = "dp";
    m.group_size = 2;
    m.bytes = bytes;
    m.phase = overlapped ? phase : 2;
    m.kernels_before = overlapped ? before : 3;
    m.overlapped = overlapped;
    return m;
  };
  k.step.comms = {bucket(b0, 1, 2), bucket(b0 / 4, 2, 3)};
  if (gather) {
    CommRecord g = bucket(b0 / 2, 3, 3);
    g.op = parallel::CommOp::kAllGather;
    k.step.comms.push_back(g);
    k.step.gathers_before_chunk = {1};
    c.dg = cm.comm_seconds(device::Collective::kAllGather, b0 / 2, {2, 1});
  }
  r.classes.push_back(k);
  return c;
}

TEST(OverlappedGradReduce, ExposedIsWhatRunsPastTheLastBackward) {
  const OverlapCase c = overlap_case(true, false);
  const StepTime t = step_time(c.r);
  const double backward_end = 3 * c.t;
  const double end0 = 2 * c.t + c.d0, end1 = std::max(backward_end, end0) + c.d1;
  const double exposed = std::max(0.0, end1 - backward_end);
  ASSERT_GT(end0, backward_end) << "the case must make bucket 1 wait for bucket 0";
  EXPECT_NEAR(t.stages[0].dp_exposed_s, exposed, 1e-12 * end1);
  EXPECT_NEAR(t.stages[0].dp_comm_s, c.d0 + c.d1, 1e-12 * end1);
  EXPECT_NEAR(t.step_s, backward_end + exposed, 1e-12 * end1);
  // The trace: bucket 0 on the stage's DP communication row (tid pp + stage),
  // beside the backward it overlaps (tid stage).
  const nlohmann::json doc = nlohmann::json::parse(simulated_trace(c.r, t));
  double backward_begin = -1, backward_end_us = -1, bucket_begin = -1;
  int comm_spans = 0;
  bool comm_row_named = false;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e.contains("tid") && e["tid"] == 1)
      comm_row_named = e["args"]["name"] == "pipeline stage 0 DP communication (overlapped)";
    if (e["ph"] != "X") continue;
    const double b = e["ts"], d = e["dur"];
    if (e["tid"] == 0 && e["name"] == "backward mb 0") backward_begin = b, backward_end_us = b + d;
    if (e["tid"] == 1) comm_spans += 1;
    if (e["tid"] == 1 && bucket_begin < 0) bucket_begin = b;
  }
  EXPECT_TRUE(comm_row_named) << doc.dump();
  EXPECT_EQ(comm_spans, 2) << "each bucket on the stage's DP communication row";
  EXPECT_GT(bucket_begin, backward_begin);
  EXPECT_LT(bucket_begin, backward_end_us) << "bucket 0 starts while the backward runs";
}

// Contention: the hidden part of the overlapped reduction ran beside kernels
// that lost the profile's dp_comm_units: 132 units, 4 taken -> the hidden
// time x 4/128 later (no tile model in this profile: the units only price the loss).
TEST(OverlappedGradReduce, TheKernelsBesideItLoseItsUnits) {
  OverlapCase c = overlap_case(true, false);
  const StepTime free = step_time(c.r);
  c.r.profile.compute_units = 132;
  c.r.profile.dp_comm_units = 4;
  const StepTime t = step_time(c.r);
  const StageTime& st = t.stages[0];
  const double hidden = st.dp_comm_s - st.dp_exposed_s;
  ASSERT_GT(hidden, 0);
  EXPECT_NEAR(st.contention_s, hidden * 4 / 128, 1e-12 * t.step_s);
  EXPECT_NEAR(t.step_s, free.step_s + hidden * 4 / 128, 1e-12 * t.step_s);
  // A blocking reduction runs beside nothing: no contention.
  OverlapCase b = overlap_case(false, false);
  b.r.profile.compute_units = 132;
  b.r.profile.dp_comm_units = 4;
  EXPECT_EQ(step_time(b.r).stages[0].contention_s, 0.0);
}

TEST(OverlappedGradReduce, BlockingExposesAllOfIt) {
  const OverlapCase on = overlap_case(true, false), off = overlap_case(false, false);
  const StepTime a = step_time(on.r), b = step_time(off.r);
  const double sum = 3 * off.t + off.d0 + off.d1;
  EXPECT_NEAR(b.step_s, sum, 1e-12 * sum);
  EXPECT_NEAR(b.stages[0].dp_exposed_s, off.d0 + off.d1, 1e-12 * sum);
  EXPECT_LT(a.stages[0].dp_exposed_s, b.stages[0].dp_exposed_s);
  EXPECT_LT(a.step_s, b.step_s);
}

// --overlap_param_gather: the gather of the last optimizer step runs from the
// step's start; the chunk's first forward waits for it, so everything after
// shifts by its time (nothing else to hide it behind on a single stage).
TEST(OverlappedParamGather, FirstForwardWaitsForItsBuckets) {
  const OverlapCase without = overlap_case(true, false), with = overlap_case(true, true);
  const StepTime a = step_time(without.r), b = step_time(with.r);
  EXPECT_NEAR(b.step_s, a.step_s + with.dg, 1e-12 * b.step_s);
  EXPECT_NEAR(b.stages[0].dp_exposed_s, a.stages[0].dp_exposed_s + with.dg, 1e-12 * b.step_s);
  EXPECT_NEAR(b.stages[0].dp_comm_s, a.stages[0].dp_comm_s + with.dg, 1e-12 * b.step_s);
}

// The optimizer's kernels (the phase after the last backward) run after the
// DP/grad collectives and before the distributed optimizer's param
// all-gather, each on the critical path; the report gives them their own line.
TEST(StepTime, OptimizerStepAfterTheGradReductionBeforeTheParamGather) {
  DryRun r = uniform_pipeline(1, 1, 1, 1e12);
  StepRecord& rec = r.classes[0].step;
  const int grad_sync = static_cast<int>(rec.phases.size());
  rec.phases.push_back({"grad_sync", -1, 0});
  rec.phases.push_back({"optimizer_step", -1, 0});
  rec.comms.push_back({parallel::CommOp::kReduceScatter, "dp", 8, 64 << 20, 0, grad_sync});
  rec.kernels.push_back({"adam_update", work(17e9, 28e9), grad_sync + 1});
  rec.kernels.push_back({"main_to_model_params_copy", work(1e9, 6e9), grad_sync + 1});
  rec.comms.push_back({parallel::CommOp::kAllGather, "dp", 8, 32 << 20, 0, grad_sync + 1});
  const device::CostModel cm(r.profile);
  const double phases = cm.kernel_seconds(1e12, 0, true) + cm.kernel_seconds(2e12, 0, true);
  const double reduce = cm.comm_seconds(device::Collective::kReduceScatter, 64 << 20, {8, 1});
  const double gather = cm.comm_seconds(device::Collective::kAllGather, 32 << 20, {8, 1});
  const double optimizer = cm.kernel_seconds(17e9, 28e9, true) + cm.kernel_seconds(1e9, 6e9, true);
  const StepTime t = step_time(r);
  EXPECT_NEAR(t.stages[0].optimizer_s, optimizer, 1e-12);
  EXPECT_NEAR(t.step_s, phases + reduce + optimizer + gather, 1e-12);
  ASSERT_EQ(t.timeline.size(), 5u);  // forward, backward, then the three below
  EXPECT_EQ(t.timeline[2].name, "communication after backward");
  EXPECT_NEAR(t.timeline[2].end_s - t.timeline[2].begin_s, reduce, 1e-12);
  EXPECT_EQ(t.timeline[3].name, "optimizer step");
  EXPECT_NEAR(t.timeline[3].begin_s, t.timeline[2].end_s, 1e-15);
  EXPECT_NEAR(t.timeline[3].end_s - t.timeline[3].begin_s, optimizer, 1e-12);
  EXPECT_EQ(t.timeline[4].name, "param all-gather");
  EXPECT_NEAR(t.timeline[4].end_s, t.step_s, 1e-15);
  EXPECT_NE(time_report(r, t).find(fmt::format("optimizer step {:.1f} ms", optimizer * 1e3)), std::string::npos)
      << time_report(r, t);
}

}  // namespace
}  // namespace mtrain::plan
