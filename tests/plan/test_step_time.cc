// The step-time arithmetic of a dry run against published formulas: the
// pipeline simulation against the 1F1B and interleaved bubble formulas of Narayanan et al. 2021
// (step = (m + (p - 1) / v) (t_f + t_b) for uniform stages, no message time).
#include <gtest/gtest.h>

#include "plan/dry_run.h"
#include "plan/step_time.h"

namespace mtrain::plan {
namespace {

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

}  // namespace
}  // namespace mtrain::plan
