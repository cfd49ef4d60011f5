// The step-time arithmetic of a dry run against published formulas:
// Megatron's TFLOP/s FLOPs (estimator-formulas.md §1d) against Korthikanti et
// al. 2022's Eq. 7 for a GPT-3 175B shape, and the pipeline simulation
// against the 1F1B and interleaved bubble formulas of Narayanan et al. 2021
// (step = (m + (p - 1) / v) (t_f + t_b) for uniform stages, no message time).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "plan/dry_run.h"
#include "plan/step_time.h"

namespace mtrain::plan {
namespace {

TEST(MegatronFlops, EqualsKorthikantiEquationSevenForGpt3) {
  model::ModelConfig c;
  c.num_layers = 96;
  c.hidden = 12288;
  c.heads = c.groups = 96;
  c.head_dim = 128;
  c.ffn = 4 * 12288;
  c.padded_vocab = 51200;
  c.swiglu = false;
  const double B = 1536, s = 2048, L = 96, h = 12288, V = 51200;
  const double eq7 = 72 * B * L * s * h * h * (1 + s / (6 * h) + V / (12 * h * L));
  EXPECT_NEAR(megatron_flops_per_iteration(c, 1536, 2048), eq7, 1e-12 * eq7);
}

TEST(MegatronFlops, SwigluAndGroupedQueryTerms) {
  // §1d by hand for a Llama-2-70B shape: g/a = 8/64, ffn/h = 28672/8192, m = 3/2.
  model::ModelConfig c;
  c.num_layers = 80;
  c.hidden = 8192;
  c.heads = 64;
  c.groups = 8;
  c.head_dim = 128;
  c.ffn = 28672;
  c.padded_vocab = 32000;
  c.swiglu = true;
  const double B = 1024, s = 4096, L = 80, h = 8192;
  const double f = 12 * B * s * L * h * h * ((1 + 8.0 / 64 + s / h) + 28672 / h * 1.5 + 32000 / (2 * L * h));
  EXPECT_NEAR(megatron_flops_per_iteration(c, 1024, 4096), f, 1e-12 * f);
}

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
          k.step.kernels.push_back({"gemm", f ? fwd : 2 * fwd, 0, static_cast<int>(k.step.phases.size())});
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

TEST(PipelineSimulation, InterleavedBubbleShrinksByTheChunkCount) {
  const int p = 4, v = 2, m = 8;
  const DryRun r = uniform_pipeline(p, v, m, 0.5e12);
  const device::CostModel cm(r.profile);
  const double tf = v * cm.kernel_seconds(0.5e12, 0, true), tb = v * cm.kernel_seconds(1e12, 0, true);
  const StepTime t = step_time(r);
  const double expect = (m + (p - 1.0) / v) * (tf + tb);
  EXPECT_NEAR(t.step_s, expect, 1e-12 * expect);
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
  rec.kernels.push_back({"adam_update", 17e9, 28e9, grad_sync + 1});
  rec.kernels.push_back({"main_to_model_params_copy", 1e9, 6e9, grad_sync + 1});
  rec.comms.push_back({parallel::CommOp::kAllGather, "dp", 8, 32 << 20, 0, grad_sync + 1});
  const device::CostModel cm(r.profile);
  const double phases = cm.kernel_seconds(1e12, 0, true) + cm.kernel_seconds(2e12, 0, true);
  const double reduce = cm.comm_seconds(device::Collective::kReduceScatter, 64 << 20, 8, false);
  const double gather = cm.comm_seconds(device::Collective::kAllGather, 32 << 20, 8, false);
  const double optimizer = cm.kernel_seconds(17e9, 28e9, true) + cm.kernel_seconds(1e9, 6e9, true);
  const StepTime t = step_time(r);
  EXPECT_NEAR(t.stages[0].optimizer_s, optimizer, 1e-12);
  EXPECT_NEAR(t.step_s, phases + reduce + optimizer + gather, 1e-12);
  ASSERT_EQ(t.timeline.size(), 5u);  // forward, backward, then the three below
  EXPECT_EQ(t.timeline[2].name, "DP/grad communication");
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
