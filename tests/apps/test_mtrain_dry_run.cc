// `mtrain ... --dry_run` end to end: a world set by NNODES / NPROC_PER_NODE is
// planned in this one process (no mpirun: the 4 GiB address-space cap of the
// harness would not even hold a launch), a 7B plan that does not fit ends
// with exit 6 and the stage, category, shortfall and fix; bad input is found
// before anything is simulated.
#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

class DryRunCli : public MtrainTest {
 protected:
  std::vector<std::string> demo(const std::string& extra) {
    return concat(words("sft configs/sft_demo.yaml --dry_run " + extra), {"--output_dir", (tmp_ / "out").string()});
  }
  static RunOptions world(int nnodes, int nproc) {
    RunOptions o;
    o.timeout_seconds = 60;
    o.env = {{"NNODES", std::to_string(nnodes)}, {"NPROC_PER_NODE", std::to_string(nproc)}};
    return o;
  }
};

TEST_F(DryRunCli, SevenBillionOnANodeThatDoesNotFitIsExitSix) {
  // Llama-2-7B, DP 8 without the distributed optimizer: 18 bytes per
  // parameter (Megatron's formula) is 113 GiB per device.
  const RunResult r = run(words("pt --model_preset llama2-7b --bf16 --seq_length 4096 --global_batch_size 64 "
                                "--train_iters 1 --lr_warmup_iters 0 --use_distributed_optimizer false --dry_run "
                                "--output_dir " +
                                (tmp_ / "out").string()),
                          "7b", world(1, 8));
  ASSERT_EQ(r.exit_code, 6) << r.describe();
  EXPECT_NE(r.out.find("8 ranks (tensor parallel 1, pipeline parallel 1, data parallel 8)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("stands for ranks 0-7"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("DOES NOT FIT"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("the plan does not fit: pipeline stage 0 (ranks 0-7)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the largest part is optimizer states"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hint: the cheapest change that fits (dry-run checked): --use_distributed_optimizer"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(tmp_ / "out" / "logging.jsonl")) << "a dry run trains nothing";
}

TEST_F(DryRunCli, TwoNodesArePlannedInOneProcess) {
  const RunResult r = run(demo("--tensor_model_parallel_size 2 --pipeline_model_parallel_size 2"), "2n", world(2, 4));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("8 ranks (tensor parallel 2, pipeline parallel 2, data parallel 2)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("pipeline stage 1: simulated rank 4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stands for ranks 4-7"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("The plan FITS on every device."), std::string::npos) << r.out;
}

TEST_F(DryRunCli, ImpossibleLayoutGetsMegatronsMessage) {
  const RunResult r = run(demo("--tensor_model_parallel_size 4"), "layout", world(1, 6));
  EXPECT_EQ(r.exit_code, 3) << r.describe();
  EXPECT_NE(r.err.find("world size (6) is not divisible by total_model_size (4)"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("Dry run"), std::string::npos) << "nothing is simulated";
}

TEST_F(DryRunCli, MissingCheckpointIsAnErrorButAMissingDatasetIsFine) {
  const RunResult load = run(demo("--load " + (tmp_ / "no_such_checkpoint").string()), "load");
  EXPECT_EQ(load.exit_code, 5) << load.describe();
  EXPECT_NE(load.err.find("no_such_checkpoint: no checkpoint there"), std::string::npos) << load.err;
  const RunResult data = run(demo("--dataset " + (tmp_ / "not_yet_written.jsonl").string()), "data");
  EXPECT_EQ(data.exit_code, 0) << data.describe();
}

TEST_F(DryRunCli, ProfileIsRefusedNotIgnored) {
  const RunResult r = run(demo("--profile"), "profile");
  EXPECT_EQ(r.exit_code, 3) << r.describe();
  EXPECT_NE(r.err.find("--profile with --dry_run (a simulated timeline) is not implemented yet"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace mtrain::functional
