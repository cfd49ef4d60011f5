// `mtrain plan` end to end: NNODES / NPROC_PER_NODE set the planned world
// without a launch (under the harness's 4 GiB address-space cap an mpirun
// would fail), the printed command re-run with --dry_run fits, nothing
// fitting is exit 6, bad flags are exit 2.
#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

class PlanCli : public MtrainTest {
 protected:
  static RunOptions world(int nproc) {
    RunOptions o;
    o.timeout_seconds = 60;
    o.env = {{"NNODES", "1"}, {"NPROC_PER_NODE", std::to_string(nproc)}};
    return o;
  }
  static std::vector<std::string> qwen7b() {
    return words("plan --model_preset qwen2.5-7b --global_batch_size 8 --seq_length 1024 --bf16");
  }
};

TEST_F(PlanCli, TheBestPlanReRunAsADryRunFits) {
  const RunResult r = run(concat(qwen7b(), {"--top", "1"}), "plan", world(4));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::string prefix = "1: mtrain ";
  const size_t at = r.out.find(prefix);
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\n2: "), std::string::npos) << r.out;
  const std::string line = r.out.substr(at + prefix.size(), r.out.find('\n', at) - at - prefix.size());
  EXPECT_NE(line.find(" --nnodes 1 --nproc_per_node 4"), std::string::npos) << line;
  // The printed line carries the world: re-run without the variables.
  RunOptions no_vars;
  no_vars.unset_env = {"NNODES", "NPROC_PER_NODE", "NPUS_PER_NODE"};
  const RunResult dry = run(concat(words(line), {"--train_iters", "1", "--dry_run"}), "dry", no_vars);
  EXPECT_EQ(dry.exit_code, 0) << dry.describe();
  EXPECT_NE(dry.out.find("FITS"), std::string::npos) << dry.out;
}

TEST_F(PlanCli, NothingFitsIsExitSix) {
  const RunResult r = run(concat(qwen7b(), {"--nproc_per_node", "1"}), "one", world(4));
  EXPECT_EQ(r.exit_code, 6) << r.describe();
  EXPECT_NE(r.err.find("no layout of 1 ranks fits: of "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hint: the smallest world that fits is 4 nodes of 1 (4 ranks): plan it with --nnodes 4"),
            std::string::npos)
      << r.err;
}

// One rank per NPU: an Ascend910B3 node has 8, so 16 per node is refused
// before any search, as a launch would refuse it (exit 8).
TEST_F(PlanCli, MoreRanksPerNodeThanTheProfileHasNpusIsExitEight) {
  const RunResult r = run(words("plan --model_preset qwen2.5-7b --global_batch_size 64 --seq_length 1024 --bf16 "
                                "--nproc_per_node 16"),
                          "crowded", world(1));
  EXPECT_EQ(r.exit_code, 8) << r.describe();
  EXPECT_NE(r.err.find("--nproc_per_node 16: a node of Ascend910B3 has 8 NPUs (one rank per NPU)"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("hint: plan at most 8 ranks per node and more nodes (--nnodes)"), std::string::npos) << r.err;
}

TEST_F(PlanCli, BadFlagsAreExitTwo) {
  const RunResult r = run(concat(qwen7b(), {"--nnodes", "0"}), "nnodes", world(1));
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  EXPECT_NE(r.err.find("--nnodes 0: not a positive integer"), std::string::npos) << r.err;
  const RunResult tp = run(concat(qwen7b(), {"--tensor_model_parallel_size", "2"}), "tp", world(1));
  EXPECT_EQ(tp.exit_code, 2) << tp.describe();
}

}  // namespace
}  // namespace mtrain::functional
