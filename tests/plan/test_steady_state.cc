// The dry step's steady-state shortcut (lib/plan/steady_state.h) equals the
// full simulation: for layouts of every schedule (no pipeline, 1F1B,
// interleaved), with TP + SP, CP ring and Ulysses, MoE under EP, the
// distributed optimizer's overlapped reductions and gathers, and
// recompute, a dry run that steps the steady state once gives the same
// record (every phase, kernel, collective and ring wait), the same device
// accounting and the same step time as one that steps every micro-batch.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "device/cost_model.h"
#include "parallel/pipeline_schedule.h"
#include "plan/dry_run.h"
#include "plan/memory_report.h"
#include "plan/plan_args.h"
#include "plan/steady_state.h"
#include "plan/step_time.h"

namespace mtrain::plan {
namespace {

using Case = LayoutCase;

class SteadyState : public ::testing::TestWithParam<Case> {};

std::vector<std::string> job(const Case& c) {
  std::vector<std::string> w = with_flags(demo("demo", 64), c.flags);
  return w;
}

void expect_same_stats(const device::MemoryStats& a, const device::MemoryStats& b, const std::string& who) {
  EXPECT_EQ(a.allocated, b.allocated) << who;
  EXPECT_EQ(a.max_allocated, b.max_allocated) << who;
  EXPECT_EQ(a.reserved, b.reserved) << who;
  EXPECT_EQ(a.max_reserved, b.max_reserved) << who;
  EXPECT_EQ(a.by_category, b.by_category) << who;
  EXPECT_EQ(a.runtime, b.runtime) << who;
  EXPECT_EQ(a.communicators, b.communicators) << who;
  EXPECT_EQ(a.host, b.host) << who;
  EXPECT_EQ(a.max_host, b.max_host) << who;
  EXPECT_EQ(a.contingent, b.contingent) << who;
}

TEST_P(SteadyState, EqualsSteppingEveryMicroBatch) {
  const Case& c = GetParam();
  const config::Args args = parse_words(job(c), c.ranks);
  const DryRun whole = dry_run(args, nullptr, /*repeat_steady_state=*/false);
  const DryRun quick = dry_run(args, nullptr, /*repeat_steady_state=*/true);
  ASSERT_EQ(whole.classes.size(), quick.classes.size());
  int shortened = 0;
  for (size_t i = 0; i < whole.classes.size(); ++i) {
    const ClassMemory &w = whole.classes[i], &q = quick.classes[i];
    const std::string who = "class " + std::to_string(i);
    EXPECT_EQ(w.microbatches_stepped, whole.microbatches) << who;
    shortened += q.microbatches_stepped < whole.microbatches;
    EXPECT_TRUE(w.step.copy_of.empty()) << who;
    EXPECT_EQ(q.step.copy_of.empty(), q.microbatches_stepped == whole.microbatches) << who;
    EXPECT_LT(q.step.kernels.size(), w.step.kernels.size()) << who << ": the copies are not written out";
    const observe::StepRecord full = observe::expanded(q.step);
    EXPECT_EQ(w.step.phases, full.phases) << who;
    EXPECT_EQ(w.step.kernels, full.kernels) << who;
    EXPECT_EQ(w.step.comms, full.comms) << who;
    EXPECT_EQ(w.step.ring_waits, full.ring_waits) << who;
    EXPECT_EQ(w.step.gathers_before_chunk, full.gathers_before_chunk) << who;
    EXPECT_TRUE(full.copy_of.empty()) << who;
    expect_same_stats(w.stats, q.stats, who);
    EXPECT_EQ(w.activation_buffers, q.activation_buffers) << who;
    EXPECT_EQ(w.communicators, q.communicators) << who;
  }
  // Every class of these layouts has enough micro-batches for the shortcut.
  EXPECT_EQ(shortened, static_cast<int>(whole.classes.size()));
  EXPECT_EQ(plan_peak(whole), plan_peak(quick));
  const StepTime tw = step_time(whole), tq = step_time(quick);
  EXPECT_EQ(tw.step_s, tq.step_s);  // the same entries in the same order, priced by the same code
  EXPECT_EQ(tw.tokens_per_s_per_device, tq.tokens_per_s_per_device);
  ASSERT_EQ(tw.timeline.size(), tq.timeline.size());
  for (size_t i = 0; i < tw.timeline.size(); ++i) EXPECT_EQ(tw.timeline[i].end_s, tq.timeline[i].end_s) << i;
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, SteadyState,
    ::testing::Values(
        Case{"no_pipeline", 1, "--global_batch_size 24 --micro_batch_size 1"},
        Case{"pp4_1f1b", 4, "--pipeline_model_parallel_size 4 --global_batch_size 24"},
        Case{"tp2_sp_pp2_interleaved_distopt_overlap", 8,
             "--tensor_model_parallel_size 2 --sequence_parallel true --pipeline_model_parallel_size 2 "
             "--num_layers_per_virtual_pipeline_stage 1 --global_batch_size 32 --use_distributed_optimizer true "
             "--overlap_grad_reduce --overlap_param_gather --bf16"},
        Case{"pp2_full_recompute_dp2", 4,
             "--pipeline_model_parallel_size 2 --global_batch_size 24 --recompute_granularity full "
             "--recompute_method uniform --recompute_num_layers 1"},
        Case{"cp2_ring_pp2", 4, "--context_parallel_size 2 --pipeline_model_parallel_size 2 --global_batch_size 16"},
        Case{"cp2_ulysses_selective", 2,
             "--context_parallel_size 2 --context_parallel_algo ulysses_cp_algo --global_batch_size 16 "
             "--recompute_granularity selective"},
        Case{"moe_ep2_pp2", 4,
             "--model_preset demo-moe --expert_model_parallel_size 2 --pipeline_model_parallel_size 2 "
             "--global_batch_size 24"},
        Case{"lora_tp2_sp_pp2", 4,
             "--train_type lora --tensor_model_parallel_size 2 --sequence_parallel true "
             "--pipeline_model_parallel_size 2 --global_batch_size 16"},
        Case{"uneven_pp3_fp16", 3,
             "--pipeline_model_parallel_size 3 --decoder_first_pipeline_num_layers 1 "
             "--decoder_last_pipeline_num_layers 1 --fp16 --global_batch_size 16"},
        Case{"tp2_cp2_distopt_dp2", 8,
             "--tensor_model_parallel_size 2 --sequence_parallel true --context_parallel_size 2 "
             "--use_distributed_optimizer true --overlap_grad_reduce --global_batch_size 32"}));

// The shortcut steps few micro-batches of a long step, for every stage.
TEST(SteadyStatePlan, AShortStepStandsForALongOne) {
  for (const auto& [stages, chunks] : std::vector<std::pair<int, int>>{{1, 1}, {4, 1}, {8, 1}, {2, 8}, {8, 12}})
    for (int stage = 0; stage < stages; ++stage) {
      parallel::PipelineShape s;
      s.stages = stages;
      s.stage = stage;
      s.chunks = chunks;
      s.microbatches = 256;
      const std::optional<SteadyStatePlan> p = plan_steady_state(s);
      ASSERT_TRUE(p) << stages << "x" << chunks << " stage " << stage;
      EXPECT_LE(p->microbatches, 5 * stages + 4) << stages << "x" << chunks << " stage " << stage;
      EXPECT_EQ((p->full_microbatches - p->microbatches) % p->period_microbatches, 0);
    }
}

// Too few micro-batches for two periods clear of the first and the last: no shortcut.
TEST(SteadyStatePlan, AShortStepIsSteppedWhole) {
  parallel::PipelineShape s;
  s.stages = 4;
  s.stage = 0;
  s.microbatches = 4;
  EXPECT_FALSE(plan_steady_state(s));
}

// A record as a StepRecorder writes it for stages x 1 chunk, M micro-batches:
// each phase one kernel (a GEMM of `rows` rows in a forward, twice that in a
// backward) and a TP all-reduce, a pipeline send after each forward, then
// grad_sync and optimizer_step with one kernel each.
observe::StepRecord synthetic(int stages, int stage, int M) {
  parallel::PipelineShape s;
  s.stages = stages;
  s.stage = stage;
  s.microbatches = M;
  observe::StepRecord r;
  const auto add_phase = [&](const std::string& name, int mb, int64_t rows, bool send) {
    observe::PhaseRecord p{name, mb, 0};
    p.first_kernel = static_cast<int64_t>(r.kernels.size());
    p.first_comm = static_cast<int64_t>(r.comms.size());
    const int phase = static_cast<int>(r.phases.size());
    KernelWork w;
    w.kind = KernelKind::kGemm;
    w.m = rows, w.n = 64, w.k = 64, w.flops = 2.0 * static_cast<double>(rows) * 64 * 64;
    r.kernels.push_back({"gemm", w, phase});
    observe::CommRecord c;
    c.op = parallel::CommOp::kAllReduce, c.group = "tp", c.group_size = 2, c.bytes = 1024, c.phase = phase;
    c.kernels_before = static_cast<int64_t>(r.kernels.size());
    r.comms.push_back(c);
    if (send) {
      c.op = parallel::CommOp::kSend, c.group = "pp", c.phase = -1;
      r.comms.push_back(c);
    }
    p.end_kernel = static_cast<int64_t>(r.kernels.size());
    p.end_comm = static_cast<int64_t>(r.comms.size());
    r.phases.push_back(p);
  };
  for (const parallel::PipeAction& a : parallel::pipeline_actions(s)) {
    const bool fwd = a.op == parallel::PipeOp::kForward;
    add_phase(fwd ? "forward_step" : "backward_step", a.microbatch, fwd ? 128 : 256, fwd && stage + 1 < stages);
  }
  add_phase("grad_sync", -1, 8, false);
  add_phase("optimizer_step", -1, 8, false);
  return r;
}

TEST(SteadyStateRecord, ARepeatingRecordExpandsToTheFullOne) {
  for (const auto& [stages, stage] : std::vector<std::pair<int, int>>{{1, 0}, {4, 0}, {4, 3}}) {
    parallel::PipelineShape full;
    full.stages = stages, full.stage = stage, full.microbatches = 32;
    const std::optional<SteadyStatePlan> p = plan_steady_state(full);
    ASSERT_TRUE(p);
    const observe::StepRecord short_run = synthetic(stages, stage, p->microbatches);
    const std::vector<device::MemoryStats> memory(short_run.phases.size());
    const std::optional<observe::StepRecord> r = expand_steady_state(short_run, memory, *p);
    ASSERT_TRUE(r) << stages << " " << stage;
    const observe::StepRecord want = synthetic(stages, stage, 32), have = observe::expanded(*r);
    EXPECT_EQ(have.phases, want.phases);
    EXPECT_EQ(have.kernels, want.kernels);
    EXPECT_EQ(have.comms, want.comms);
    const device::CostModel cost(device::DeviceProfile{});
    const auto nodes = [](std::string_view) { return 1; };
    EXPECT_EQ(observe::record_cost(*r, cost, true, nodes), observe::record_cost(want, cost, true, nodes));
  }
}

// What the shortcut does not take: two periods of different work, or of
// different memory, or a second period that raises a peak.
TEST(SteadyStateRecord, PeriodsThatDifferAreNotRepeated) {
  parallel::PipelineShape full;
  full.stages = 4, full.microbatches = 32;
  const SteadyStatePlan p = *plan_steady_state(full);
  const observe::StepRecord base = synthetic(4, 0, p.microbatches);
  const std::vector<device::MemoryStats> same(base.phases.size());
  const size_t second = static_cast<size_t>(p.period_start + p.period_actions);
  observe::StepRecord work = base;
  work.kernels[static_cast<size_t>(work.phases[second].first_kernel)].work.m += 1;
  EXPECT_FALSE(expand_steady_state(work, same, p)) << "a kernel of the second period differs";
  observe::StepRecord comm = base;
  comm.comms[static_cast<size_t>(comm.phases[second].first_comm)].bytes += 2;
  EXPECT_FALSE(expand_steady_state(comm, same, p)) << "a collective of the second period differs";
  std::vector<device::MemoryStats> held = same;
  held[second + static_cast<size_t>(p.period_actions)].allocated = 4096;
  EXPECT_FALSE(expand_steady_state(base, held, p)) << "the second period ends holding more";
  std::vector<device::MemoryStats> peak = same;
  for (size_t j = second + static_cast<size_t>(p.period_actions); j < peak.size(); ++j) peak[j].max_reserved = 1;
  EXPECT_FALSE(expand_steady_state(base, peak, p)) << "the second period raised the peak";
  EXPECT_TRUE(expand_steady_state(base, same, p));
}

}  // namespace
}  // namespace mtrain::plan
