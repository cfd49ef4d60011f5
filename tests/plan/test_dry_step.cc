// A dry run's shape-only training step executes what a real step executes:
// for small demo layouts, the kernel regions (name, FLOPs, bytes) and the
// collectives (op, group, bytes) of a real run's first iteration (ranks as
// threads of a SimWorld, real data and math) equal, in order, those of the
// dry run's step of the rank class that stands for each rank; and the
// device peak, now including the step, equals the real run's.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "plan/dry_run.h"
#include "plan/dry_run_fixture.h"
#include "plan/memory_report.h"
#include "plan/plan_args.h"
#include "plan/step_time.h"

namespace mtrain::plan {
namespace {

using Layout = LayoutCase;

class StepAgrees : public DryRunTest, public ::testing::WithParamInterface<Layout> {
 protected:
  // Pretraining on the demo corpus: every row is --seq_length tokens, the
  // shape a dry run feeds.
  std::string pretrain(const std::string& extra) const {
    return "pt --model_preset demo --tokenizer configs/demo/tokenizer.json --dataset configs/demo/pt.txt "
           "--seq_length 32 --train_iters 1 --lr_warmup_iters 0 --micro_batch_size 2 --global_batch_size 8 "
           "--eval_interval 0 --num_generate_samples 0 --num_threads 1 --output_dir " +
           out_.string() + " " + extra;
  }
};

std::string show(const PhaseRecord& p) {
  return p.name + " micro-batch " + std::to_string(p.microbatch) + " chunk " + std::to_string(p.chunk);
}
std::string show(const KernelRecord& k) {
  return std::string(k.name) + " flops " + std::to_string(k.work.flops) + " bytes " + std::to_string(k.work.bytes) +
         " phase " + std::to_string(k.phase);
}
std::string show(const CommRecord& c) {
  return std::string(parallel::comm_op_name(c.op)) + " " + c.group + "/" + std::to_string(c.group_size) + " bytes " +
         std::to_string(c.bytes) + "+" + std::to_string(c.recv_bytes);
}

template <typename T>
void expect_same_sequence(const std::vector<T>& real, const std::vector<T>& dry, const std::string& what) {
  EXPECT_EQ(real.size(), dry.size()) << what;
  for (size_t i = 0; i < std::min(real.size(), dry.size()); ++i) {
    if (real[i] == dry[i]) continue;
    std::string before;  // what both ran just before it, to place it
    for (size_t j = i >= 3 ? i - 3 : 0; j < i; ++j) before += "\n  #" + std::to_string(j) + " " + show(real[j]);
    ADD_FAILURE() << what << " #" << i << ": real " << show(real[i]) << ", dry " << show(dry[i])
                  << "; after:" << before;
    return;  // the first difference says it; the rest follow from it
  }
}

// The cost model applied, here, to every kernel and collective a real rank
// executed (inter-node: the demo worlds fit one node).
struct Cost {
  double compute_s = 0, comm_s = 0;
};
Cost real_cost(const StepRecord& r, const device::CostModel& cm, bool sixteen) {
  Cost c;
  for (const KernelRecord& k : r.kernels) c.compute_s += cm.kernel_seconds(k.work, sixteen);
  for (const CommRecord& m : r.comms) {
    const auto op = m.op == parallel::CommOp::kAllReduce       ? device::Collective::kAllReduce
                    : m.op == parallel::CommOp::kAllGather     ? device::Collective::kAllGather
                    : m.op == parallel::CommOp::kReduceScatter ? device::Collective::kReduceScatter
                    : m.op == parallel::CommOp::kBroadcast     ? device::Collective::kBroadcast
                    : m.op == parallel::CommOp::kBarrier       ? device::Collective::kBarrier
                                                               : device::Collective::kPointToPoint;
    if (m.group != "pp")
      c.comm_s += cm.comm_seconds(op, static_cast<double>(m.bytes + m.recv_bytes), {m.group_size, 1});
  }
  return c;
}

// Consistency: each stage's simulated compute and optimizer step are the
// cost model's time for the kernels a real rank of that stage ran (the
// optimizer's included), its communication that of the
// real rank's collectives; without a pipeline the step time is exactly their
// sum and the device's waits for the host (nothing overlaps).
void expect_time_is_the_real_runs_cost(const DryRun& dry, const std::vector<std::shared_ptr<StepRecorder>>& real) {
  const StepTime t = step_time(dry);
  const device::CostModel cm(dry.profile);
  const bool sixteen = dry.whole_model.dtype != DType::kF32;
  ASSERT_GT(t.step_s, 0);
  for (const ClassMemory& c : dry.classes) {
    const StageTime& st = t.stages[c.rank_class.stage];
    const Cost r = real_cost(real[c.rank_class.representative]->record(), cm, sixteen);
    const double tol = 1e-12 * (r.compute_s + r.comm_s);  // summation order only
    EXPECT_NEAR(st.compute_s + st.optimizer_s, r.compute_s, tol) << "stage " << st.stage;
    EXPECT_GT(st.optimizer_s, 0) << "stage " << st.stage << ": the optimizer step costs no time";
    // Overlapped DP collectives run on their own stream: counted once, beside the rest.
    EXPECT_NEAR(st.tp_comm_s + st.cp_comm_s + st.ep_comm_s + st.tail_comm_s + st.overlapped_s, r.comm_s, tol)
        << "stage " << st.stage;
    // The device's waits for the host (host_dispatch_s per op) over the real rank's ops.
    const double host_wait =
        record_cost(real[c.rank_class.representative]->record(), cm, sixteen, [](std::string_view) {
          return 1;
        }).host_wait_s;
    EXPECT_NEAR(st.host_wait_s, host_wait, tol) << "stage " << st.stage;
    if (dry.pp == 1 && st.overlapped_s == 0) {
      EXPECT_NEAR(t.step_s, r.compute_s + r.comm_s + host_wait, tol);
    } else if (dry.pp == 1) {  // the overlapped part that is hidden is not on the clock
      EXPECT_NEAR(t.step_s, r.compute_s + r.comm_s + host_wait - (st.dp_comm_s - st.dp_exposed_s), tol);
    }
  }
}

TEST_P(StepAgrees, KernelsCollectivesAndPeakMemory) {
  const Layout& l = GetParam();
  const config::Args args = parse(pretrain(l.flags), l.ranks);
  const int dtype_bytes = args.bf16 || args.fp16 ? 2 : 4;
  std::vector<std::shared_ptr<StepRecorder>> recorders;
  for (int r = 0; r < l.ranks; ++r) recorders.push_back(std::make_shared<StepRecorder>(1, dtype_bytes));
  const std::vector<device::MemoryStats> real =
      run_real(args, l.ranks, std::vector<std::shared_ptr<observe::TrainHook>>(recorders.begin(), recorders.end()));
  const DryRun dry = dry_run(args);
  expect_time_is_the_real_runs_cost(dry, recorders);
  for (const ClassMemory& c : dry.classes) {
    const StepRecord step = observe::expanded(c.step);  // a steady state stepped once, written out
    ASSERT_FALSE(step.kernels.empty()) << "the dry run's step recorded no kernel";
    // With the overlap flags the DP buckets are recorded where they started, op and bytes filled in.
    int overlapped = 0;
    for (const CommRecord& m : step.comms) overlapped += m.overlapped && m.group == "dp" && m.bytes > 0;
    EXPECT_EQ(overlapped > 0, std::string(l.flags).find("--overlap_grad_reduce") != std::string::npos);
    for (int rank : c.rank_class.ranks) {
      const StepRecord& r = recorders[rank]->record();
      ASSERT_FALSE(r.kernels.empty()) << "rank " << rank << " recorded no kernel";
      const std::string who = "rank " + std::to_string(rank);
      expect_same_sequence(r.phases, step.phases, who + " phases");
      expect_same_sequence(r.kernels, step.kernels, who + " kernels");
      expect_same_sequence(r.comms, step.comms, who + " collectives");
      EXPECT_EQ(c.stats.max_allocated, real[rank].max_allocated) << who;
      EXPECT_EQ(c.stats.max_reserved, real[rank].max_reserved) << who;
    }
  }
}

// A 16-bit model's TP/SP collectives carry 16-bit activations (Megatron's
// wire), so the cost model prices them at 2 bytes per element: every
// sequence-parallel all-gather of the hidden states moves B s h x 2 bytes.
TEST_F(DryRunTest, SixteenBitTensorParallelActivationsTravelAtTwoBytes) {
  const config::Args args = parse(
      "pt --model_preset demo --vocab_size 512 --seq_length 32 --train_iters 1 --micro_batch_size 2 "
      "--global_batch_size 2 --tensor_model_parallel_size 2 --sequence_parallel --bf16 --output_dir " +
          out_.string(),
      2);
  const DryRun dry = dry_run(args);
  const int64_t hidden_elems = 2 * 32 * dry.whole_model.hidden;
  int gathers = 0;
  for (const CommRecord& c : observe::expanded(dry.classes.at(0).step).comms) {
    if (c.group != "tp" || c.op != parallel::CommOp::kAllGather) continue;
    EXPECT_NE(c.bytes, 4 * hidden_elems) << "an fp32 wire in a bf16 model";
    gathers += c.bytes == 2 * hidden_elems;
  }
  EXPECT_GT(gathers, 0);
}

// A DP 2 dry run with --overlap_grad_reduce (and --overlap_param_gather)
// moves the same collectives but exposes at most what the blocking run does,
// and its step is no longer; without overlap all DP communication is exposed.
TEST_F(DryRunTest, OverlappedDataParallelCommunicationExposesLess) {
  const std::string base =
      "pt --model_preset demo --vocab_size 512 --seq_length 32 --train_iters 1 --micro_batch_size 2 "
      "--global_batch_size 8 --use_distributed_optimizer --ddp_bucket_size 20000 --output_dir " +
      out_.string();
  const StepTime blocking = step_time(dry_run(parse(base, 2)));
  const StepTime grad = step_time(dry_run(parse(base + " --overlap_grad_reduce", 2)));
  const StepTime both = step_time(dry_run(parse(base + " --overlap_grad_reduce --overlap_param_gather", 2)));
  const StageTime &b = blocking.stages.at(0), &g = grad.stages.at(0), &o = both.stages.at(0);
  const double tol = 1e-12 * b.dp_comm_s;
  ASSERT_GT(b.dp_comm_s, 0);
  EXPECT_NEAR(b.dp_exposed_s, b.dp_comm_s, tol) << "blocking: all of it exposed";
  EXPECT_NEAR(g.dp_comm_s, b.dp_comm_s, tol) << "the same collectives";
  EXPECT_NEAR(o.dp_comm_s, b.dp_comm_s, tol) << "the same collectives";
  EXPECT_LT(g.dp_exposed_s, b.dp_exposed_s);
  EXPECT_LE(o.dp_exposed_s, b.dp_exposed_s + tol);
  EXPECT_LT(grad.step_s, blocking.step_s);
  EXPECT_LE(both.step_s, blocking.step_s * (1 + 1e-12));
}

// fp16 starts from a loss scale the demo's gradients do not overflow: a real
// step skipped for overflow has no grad-norm reduction, a dry step never skips.
INSTANTIATE_TEST_SUITE_P(
    Layouts, StepAgrees,
    ::testing::Values(
        Layout{"single", 1, ""}, Layout{"tp2_sp", 2, "--tensor_model_parallel_size 2 --sequence_parallel"},
        Layout{"pp2", 2, "--pipeline_model_parallel_size 2"},
        Layout{"dp2_distopt_bf16", 2, "--use_distributed_optimizer --bf16"},
        // bf16 main grads: every gradient reduction moves 2 bytes an element, in both modes.
        Layout{"dp2_distopt_bf16_grads", 2,
               "--use_distributed_optimizer --bf16 --grad_reduce_in_bf16 --overlap_grad_reduce"},
        Layout{"dp2_overlap_grad_reduce", 2,
               "--use_distributed_optimizer false --overlap_grad_reduce --ddp_bucket_size 20000"},
        Layout{"pp2dp2_overlap_both_bf16", 4,
               "--pipeline_model_parallel_size 2 --use_distributed_optimizer --bf16 "
               "--overlap_grad_reduce --overlap_param_gather --ddp_bucket_size 20000"},
        Layout{"pp2dp2_interleaved_overlap_both", 4,
               "--pipeline_model_parallel_size 2 --num_layers_per_virtual_pipeline_stage 1 "
               "--overlap_grad_reduce --overlap_param_gather --ddp_bucket_size 20000"},
        Layout{"full_recompute_block", 1,
               "--recompute_granularity full --recompute_method block --recompute_num_layers 1"},
        Layout{"selective_recompute_unfused", 1, "--recompute_granularity selective --attention_backend unfused"},
        Layout{"tp2_pp2_interleaved_fp16", 4,
               "--tensor_model_parallel_size 2 --pipeline_model_parallel_size 2 "
               "--num_layers_per_virtual_pipeline_stage 1 --fp16 --initial_loss_scale 4096"},
        // Frozen weights: a real run skips their weight-gradient GEMMs, so must the dry run.
        Layout{"lora", 1, "--train_type lora"},
        Layout{"lora_qkv_only_tp2_sp", 2,
               "--train_type lora --target_modules linear_qkv --tensor_model_parallel_size 2 "
               "--sequence_parallel"},
        Layout{"lora_pp2_unfused_grad_accumulation", 2,
               "--train_type lora --pipeline_model_parallel_size 2 --gradient_accumulation_fusion false"}),
    [](const ::testing::TestParamInfo<Layout>& i) { return std::string(i.param.name); });

// MoE: the routed rows are the data's, so a real step's expert GEMMs and
// dispatch sizes differ from a dry step's even split. What the router adds
// beside them is the same in both: the load-balancing loss's all-reduce of
// each layer's tokens per expert over its token group (TP 2 with SP: the tp
// group), once per MoE layer and micro-batch, 8 experts x 4 bytes.
class MoeStep : public StepAgrees {};

TEST_F(MoeStep, TheAuxLossSumsOfARealStepAreInTheDryStep) {
  const config::Args args = parse(
      pretrain("--model_preset demo-moe --tensor_model_parallel_size 2 --sequence_parallel --moe_aux_loss_coeff 0.01"),
      2);
  std::vector<std::shared_ptr<StepRecorder>> recorders;
  for (int r = 0; r < 2; ++r) recorders.push_back(std::make_shared<StepRecorder>(1, 4));
  run_real(args, 2, std::vector<std::shared_ptr<observe::TrainHook>>(recorders.begin(), recorders.end()));
  const DryRun dry = dry_run(args);
  auto sums = [](const StepRecord& r) {
    int n = 0;
    for (const CommRecord& c : r.comms) n += c.op == parallel::CommOp::kAllReduce && c.group == "tp" && c.bytes == 32;
    return n;
  };
  const int want = 4 * dry.microbatches;  // 4 MoE layers
  for (const ClassMemory& c : dry.classes) {
    EXPECT_EQ(sums(observe::expanded(c.step)), want) << "dry";
    for (int rank : c.rank_class.ranks) EXPECT_EQ(sums(recorders[rank]->record()), want) << "rank " << rank;
  }
}

// The routed experts' activation as Megatron runs it: with grouped GEMM
// (GroupedMLP, no expert bias) one kernel over every local expert's rows per
// MoE layer and micro-batch; with --moe_grouped_gemm false (SequentialMLP)
// one per expert. Counted in a real step (demo-moe: 4 MoE layers, 8 experts,
// each layer's shared expert one more) and in the dry step.
TEST_F(MoeStep, TheRoutedActivationIsOneKernelUnderGroupedGemm) {
  const auto count = [](const StepRecord& r, const char* name) {
    return std::count_if(r.kernels.begin(), r.kernels.end(),
                         [&](const KernelRecord& k) { return std::string_view(k.name) == name; });
  };
  for (const bool grouped : {true, false}) {
    const config::Args args =
        parse(pretrain(std::string("--model_preset demo-moe --moe_grouped_gemm ") + (grouped ? "true" : "false")), 1);
    auto recorder = std::make_shared<StepRecorder>(1, 4);
    run_real(args, 1, {recorder});
    const DryRun dry = dry_run(args);
    const long per_layer = (grouped ? 1 : 8) + 1;  // routed + shared expert
    const long want = 4 * per_layer * dry.microbatches;
    for (const char* name : {"bias_swiglu_forward", "bias_swiglu_backward"}) {
      EXPECT_EQ(count(recorder->record(), name), want) << name << (grouped ? " grouped" : " sequential");
      EXPECT_EQ(count(observe::expanded(dry.classes[0].step), name), want) << name << " dry";
    }
  }
}

// SFT planned from the data: a dry run of the demo SFT job reads and
// tokenizes its dataset and steps the shapes of the batches the run builds
// (each micro-batch padded to its longest row), so its step is a real
// step's, kernel by kernel and collective by collective, at DP 2 (each rank
// its own shard; rank class 0 stands for DP rank 0). The activation slots
// stay sized for --max_length, as the real run allocates them.
class SftStep : public StepAgrees {};

TEST_F(SftStep, AnSftDryRunStepsTheDatasetsBatchesAsTheRealRun) {
  const config::Args args = parse(demo("--use_distributed_optimizer --train_iters 1 --lr_decay_iters 1 "
                                       "--lr_warmup_iters 0"),
                                  2);
  std::vector<std::shared_ptr<StepRecorder>> recorders;
  for (int r = 0; r < 2; ++r) recorders.push_back(std::make_shared<StepRecorder>(1, 4));
  const std::vector<device::MemoryStats> real =
      run_real(args, 2, std::vector<std::shared_ptr<observe::TrainHook>>(recorders.begin(), recorders.end()));
  const DryRun dry = dry_run(args);
  ASSERT_EQ(dry.data_lengths.size(), static_cast<size_t>(dry.microbatches));
  EXPECT_LT(*std::max_element(dry.data_lengths.begin(), dry.data_lengths.end()), dry.seq_length)
      << "the demo's rows are shorter than --max_length";
  for (const ClassMemory& c : dry.classes) {
    for (int rank : c.rank_class.ranks) {
      if (rank != 0) continue;  // the class's shapes are DP rank 0's batches
      const StepRecord& r = recorders[rank]->record();
      const StepRecord step = observe::expanded(c.step);
      expect_same_sequence(r.phases, step.phases, "rank 0 phases");
      expect_same_sequence(r.kernels, step.kernels, "rank 0 kernels");
      expect_same_sequence(r.comms, step.comms, "rank 0 collectives");
      EXPECT_EQ(c.stats.max_allocated, real[rank].max_allocated);
    }
  }
  const DryRun shapes = dry_run(args, DryRunData::kShapes);
  EXPECT_TRUE(shapes.data_lengths.empty());
  EXPECT_LT(step_time(dry).step_s, step_time(shapes).step_s) << "shorter rows, a shorter step";
  EXPECT_NE(memory_report(dry).find("its rows the lengths of the first global batch of the dataset\n"),
            std::string::npos);
}

}  // namespace
}  // namespace mtrain::plan
