// A dry run's shape-only training step executes what a real step executes:
// for small demo layouts, the kernel regions (name, FLOPs, bytes) and the
// collectives (op, group, bytes) of a real run's first iteration (ranks as
// threads of a SimWorld, real data and math) equal, in order, those of the
// dry run's step of the rank class that stands for each rank; and the
// device peak, now including the step, equals the real run's.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "plan/dry_run.h"
#include "plan/dry_run_fixture.h"

namespace mtrain::plan {
namespace {

struct Layout {
  const char* name;
  int ranks;
  const char* flags;
};

void PrintTo(const Layout& l, std::ostream* os) { *os << l.name; }

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

std::string show(const KernelRecord& k) {
  return k.name + " flops " + std::to_string(k.flops) + " bytes " + std::to_string(k.bytes);
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
    ADD_FAILURE() << what << " #" << i << ": real " << show(real[i]) << ", dry " << show(dry[i]);
    return;  // the first difference says it; the rest follow from it
  }
}

TEST_P(StepAgrees, KernelsCollectivesAndPeakMemory) {
  const Layout& l = GetParam();
  const config::Args args = parse(pretrain(l.flags), l.ranks);
  const int dtype_bytes = args.bf16 || args.fp16 ? 2 : 4;
  std::vector<std::shared_ptr<StepRecorder>> recorders;
  for (int r = 0; r < l.ranks; ++r) recorders.push_back(std::make_shared<StepRecorder>(1, dtype_bytes));
  const std::vector<device::MemoryStats> real =
      run_real(args, l.ranks, std::vector<std::shared_ptr<train::TrainHook>>(recorders.begin(), recorders.end()));
  const DryRun dry = dry_run(args);
  for (const ClassMemory& c : dry.classes) {
    ASSERT_FALSE(c.step.kernels.empty()) << "the dry run's step recorded no kernel";
    for (int rank : c.rank_class.ranks) {
      const StepRecord& r = recorders[rank]->record();
      ASSERT_FALSE(r.kernels.empty()) << "rank " << rank << " recorded no kernel";
      const std::string who = "rank " + std::to_string(rank);
      expect_same_sequence(r.kernels, c.step.kernels, who + " kernels");
      expect_same_sequence(r.comms, c.step.comms, who + " collectives");
      EXPECT_EQ(c.stats.max_allocated, real[rank].max_allocated) << who;
      EXPECT_EQ(c.stats.max_reserved, real[rank].max_reserved) << who;
    }
  }
}

// fp16 starts from a loss scale the demo's gradients do not overflow: a real
// step skipped for overflow has no grad-norm reduction, a dry step never skips.
INSTANTIATE_TEST_SUITE_P(
    Layouts, StepAgrees,
    ::testing::Values(Layout{"single", 1, ""},
                      Layout{"tp2_sp", 2, "--tensor_model_parallel_size 2 --sequence_parallel"},
                      Layout{"pp2", 2, "--pipeline_model_parallel_size 2"},
                      Layout{"dp2_distopt_bf16", 2, "--use_distributed_optimizer --bf16"},
                      Layout{"tp2_pp2_interleaved_fp16", 4,
                             "--tensor_model_parallel_size 2 --pipeline_model_parallel_size 2 "
                             "--num_layers_per_virtual_pipeline_stage 1 --fp16 --initial_loss_scale 4096"}),
    [](const ::testing::TestParamInfo<Layout>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace mtrain::plan
