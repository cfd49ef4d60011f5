// Real launches of the mtrain binary (ctest label `mpi`): the NPROC_PER_NODE
// re-launch, a direct mpirun, exit codes through the launcher, device
// visibility errors, two "nodes" on loopback joining one world, a missing
// node, and a rank that dies. Every scenario repeats loops() times
// (MTRAIN_LAUNCH_LOOPS, default 2) to show it is not flaky.
#include <gtest/gtest.h>
#include <unistd.h>

#include "launch_runner.h"

namespace mtrain::launch_test {
namespace {

const std::string kMtrain = MTRAIN_BIN;
constexpr double kTimeout = 60;  // per process: far above any expected run, below the ctest TIMEOUT

class LaunchMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mtrain_launch_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  fs::path dir_;
};

void expect_rank_lines(const Result& r, int nnodes, int nproc, const std::vector<int>& devices = {}) {
  const auto lines = rank_lines(r.out);
  const int world = nnodes * nproc;
  ASSERT_EQ(static_cast<int>(lines.size()), world) << r.describe();
  for (int i = 0; i < world; ++i) {
    EXPECT_EQ(lines[i].rank, i) << r.describe();
    EXPECT_EQ(lines[i].world, world);
    EXPECT_EQ(lines[i].node, i / nproc) << "rank " << i;
    EXPECT_EQ(lines[i].local, i % nproc) << "rank " << i;
    EXPECT_EQ(lines[i].device, devices.empty() ? i % nproc : devices[i % nproc]) << "rank " << i;
    EXPECT_EQ(lines[i].threads, 1);
    for (int j = 0; j < i; ++j) EXPECT_NE(lines[i].pid, lines[j].pid) << "ranks " << j << " and " << i;
  }
}

TEST_F(LaunchMpi, RelaunchDevices) {
  for (int i = 0; i < loops(); ++i) {
    const Result r = run({kMtrain, "devices"}, {{"NPROC_PER_NODE", "2"}}, dir_, "relaunch", kTimeout);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_EQ(count_of(r.out, "run sh: `mpirun -np 2 "), 1) << r.out;
    EXPECT_NE(r.out.find("--mca btl self,vader"), std::string::npos) << r.out;
    if (geteuid() == 0) {
      EXPECT_NE(r.out.find("--allow-run-as-root"), std::string::npos) << r.out;
    }
    EXPECT_NE(r.out.find("node 0 (host "), std::string::npos) << r.out;
    expect_rank_lines(r, 1, 2);

    // MindSpeed's spelling, three ranks on three chosen devices.
    const Result v = run({kMtrain, "devices"}, {{"NPUS_PER_NODE", "3"}, {"ASCEND_RT_VISIBLE_DEVICES", "5,6,7"}}, dir_,
                         "npus", kTimeout);
    ASSERT_EQ(v.exit_code, 0) << v.describe();
    EXPECT_NE(v.out.find("visible npu:5,6,7 (ASCEND_RT_VISIBLE_DEVICES=5,6,7)"), std::string::npos) << v.out;
    expect_rank_lines(v, 1, 3, {5, 6, 7});
  }
}

TEST_F(LaunchMpi, DirectMpirun) {
  for (int i = 0; i < loops(); ++i) {
    std::vector<std::string> cmd = {"mpirun", "-np", "2", "--oversubscribe", "--mca", "btl", "self,vader"};
    if (geteuid() == 0) cmd.push_back("--allow-run-as-root");
    cmd.insert(cmd.end(), {kMtrain, "devices"});
    // NPROC_PER_NODE in the environment must not make the ranks launch again.
    const Result r = run(cmd, {{"NPROC_PER_NODE", "2"}}, dir_, "direct", kTimeout);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_EQ(r.out.find("run sh:"), std::string::npos) << "ranks re-launched:\n" << r.out;
    expect_rank_lines(r, 1, 2);
  }
}

// `mtrain sft` reading a --dataset file that does not exist: every rank fails
// alike at run time (exit 4, a data error), before any training.
std::vector<std::string> sft_missing_dataset(const fs::path& dir) {
  return {kMtrain,
          "sft",
          "configs/sft_demo.yaml",
          "--dataset",
          (dir / "missing.jsonl").string(),
          "--output_dir",
          (dir / "out").string()};
}
const std::string kMissingDataset = "cannot open dataset file '";

TEST_F(LaunchMpi, ChildExitCodePropagates) {
  const std::string root = MTRAIN_SOURCE_DIR;
  for (int i = 0; i < loops(); ++i) {
    // A runtime error every rank hits alike: the ranks' exit code comes back
    // through mpirun and the launcher, and the error is printed once, without a rank.
    const Result r = run(sft_missing_dataset(dir_), {{"NPROC_PER_NODE", "2"}}, dir_, "sft", kTimeout, root);
    EXPECT_EQ(r.exit_code, 4) << r.describe();
    EXPECT_EQ(count_of(r.err, kMissingDataset), 1) << r.err;
    EXPECT_EQ(count_of(r.err, "mtrain: error: cannot open dataset file"), 1) << "printed with a rank:\n" << r.err;
    EXPECT_EQ(count_of(r.err, "mpirun ended with exit code 4"), 1) << r.err;
    EXPECT_EQ(r.err.find("MPI_ABORT"), std::string::npos) << "all ranks failed alike: a clean shutdown\n" << r.err;
    EXPECT_EQ(r.out.find("iteration"), std::string::npos) << "training started:\n" << r.out;
  }
  // The world size reaches validation: TP=4 does not fit a world of 2 (exit 3, printed once).
  const Result tp4 = run({kMtrain, "sft", "configs/sft_demo.yaml", "--tensor_model_parallel_size", "4"},
                         {{"NPROC_PER_NODE", "2"}}, dir_, "tp4", kTimeout, root);
  EXPECT_EQ(tp4.exit_code, 3) << tp4.describe();
  EXPECT_EQ(count_of(tp4.err, "world size (2) is not divisible by total_model_size (4)"), 1) << tp4.err;
}

// torchrun's flags launch like the variables: --nproc_per_node 2 starts two
// ranks (the world size reaches validation, as in ChildExitCodePropagates);
// under a direct mpirun they must agree with -np.
TEST_F(LaunchMpi, FlagsLaunchLikeTheVariables) {
  const std::string root = MTRAIN_SOURCE_DIR;
  for (int i = 0; i < loops(); ++i) {
    const Result r =
        run({kMtrain, "sft", "configs/sft_demo.yaml", "--nproc_per_node", "2", "--tensor_model_parallel_size", "4"}, {},
            dir_, "flags", kTimeout, root);
    EXPECT_EQ(r.exit_code, 3) << r.describe();
    EXPECT_EQ(count_of(r.out, "run sh: `mpirun -np 2 "), 1) << r.out;
    EXPECT_EQ(count_of(r.err, "world size (2) is not divisible by total_model_size (4)"), 1) << r.err;
  }
  std::vector<std::string> cmd = {"mpirun", "-np", "2", "--oversubscribe", "--mca", "btl", "self,vader"};
  if (geteuid() == 0) cmd.push_back("--allow-run-as-root");
  cmd.insert(cmd.end(), {kMtrain, "sft", "configs/sft_demo.yaml", "--nproc_per_node", "4"});
  const Result d = run(cmd, {}, dir_, "direct_flags", kTimeout, root);
  EXPECT_EQ(d.exit_code, 2) << d.describe();
  EXPECT_EQ(count_of(d.err, "--nnodes 1 x --nproc_per_node 4 is 4 ranks, but mpirun started 2"), 1) << d.err;
}

// The same failure on two nodes: both exit with it, the message appears once,
// and no launcher stops a mpirun that is already ending (that crashes mpirun).
TEST_F(LaunchMpi, ChildExitCodePropagatesOnTwoNodes) {
  const std::string root = MTRAIN_SOURCE_DIR;
  for (int i = 0; i < loops(); ++i) {
    const int port = free_port();
    Process n0(sft_missing_dataset(dir_), node_env(2, 0, 1, port, 30), dir_, "sft2n0", root);
    Process n1(sft_missing_dataset(dir_), node_env(2, 1, 1, port, 30), dir_, "sft2n1", root);
    const Result r0 = n0.finish(kTimeout), r1 = n1.finish(kTimeout);
    EXPECT_EQ(r0.exit_code, 4) << r0.describe();
    EXPECT_EQ(r1.exit_code, 4) << r1.describe();
    EXPECT_EQ(count_of(r0.err, kMissingDataset) + count_of(r1.err, kMissingDataset), 1)
        << r0.err << "\n=== node 1 ===\n"
        << r1.err;
    for (const Result* r : {&r0, &r1}) {
      EXPECT_EQ(r->err.find("Segmentation fault"), std::string::npos) << r->err;
      EXPECT_EQ(r->err.find("stopping them"), std::string::npos) << r->err;
    }
  }
}

TEST_F(LaunchMpi, TooManyLocalRanksForVisibleDevices) {
  for (int i = 0; i < loops(); ++i) {
    const Result r = run({kMtrain, "devices"}, {{"NPROC_PER_NODE", "2"}, {"ASCEND_RT_VISIBLE_DEVICES", "0"}}, dir_,
                         "visible", kTimeout);
    EXPECT_EQ(r.exit_code, 8) << r.describe();
    EXPECT_EQ(count_of(r.err,
                       "2 local ranks do not fit: ASCEND_RT_VISIBLE_DEVICES=0 makes 1 of this node's 8 "
                       "devices visible"),
              1)
        << r.err;
    EXPECT_TRUE(rank_lines(r.out).empty()) << r.out;
  }
  const Result cuda =
      run({kMtrain, "devices"}, {{"NPROC_PER_NODE", "3"}, {"CUDA_VISIBLE_DEVICES", "1,2"}}, dir_, "cuda", kTimeout);
  EXPECT_EQ(cuda.exit_code, 8) << cuda.describe();
  EXPECT_NE(cuda.err.find("3 local ranks do not fit: CUDA_VISIBLE_DEVICES=1,2 makes 2"), std::string::npos) << cuda.err;
}

// Two "nodes" on loopback in one test: the same command twice with NODE_RANK=0/1.
TEST_F(LaunchMpi, TwoNodesOnLoopbackJoinOneWorld) {
  for (int nproc : {1, 2}) {
    for (int i = 0; i < loops(); ++i) {
      const int port = free_port();
      const std::string tag = "n" + std::to_string(nproc) + "_" + std::to_string(i);
      // Start order alternates: node 1 may come first and must wait for node 0.
      const int first = i % 2;
      Process a({kMtrain, "devices"}, node_env(2, first, nproc, port, 30), dir_, tag + "_node" + std::to_string(first));
      if (first == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      Process b({kMtrain, "devices"}, node_env(2, 1 - first, nproc, port, 30), dir_,
                tag + "_node" + std::to_string(1 - first));
      Result ra = a.finish(kTimeout), rb = b.finish(kTimeout);
      const Result& node0 = first == 0 ? ra : rb;
      const Result& node1 = first == 0 ? rb : ra;
      ASSERT_EQ(node0.exit_code, 0) << node0.describe() << "\n=== node 1 ===\n" << node1.describe();
      ASSERT_EQ(node1.exit_code, 0) << node1.describe() << "\n=== node 0 ===\n" << node0.describe();
      EXPECT_EQ(count_of(node0.out, "run sh: `"), 2) << "ompi-server and mpirun:\n" << node0.out;
      EXPECT_NE(node0.out.find("OMPI_MCA_pmix_server_uri="), std::string::npos) << node0.out;
      expect_rank_lines(node0, 2, nproc);
      EXPECT_TRUE(rank_lines(node1.out).empty()) << "only world rank 0 prints:\n" << node1.out;
    }
  }
}

TEST_F(LaunchMpi, MissingNodeTimesOutWithAClearError) {
  constexpr double kRdzv = 2;
  for (int i = 0; i < loops(); ++i) {
    const int port0 = free_port(), port1 = free_port();
    Process alone0({kMtrain, "devices"}, node_env(2, 0, 2, port0, kRdzv), dir_, "alone0_" + std::to_string(i));
    Process alone1({kMtrain, "devices"}, node_env(2, 1, 1, port1, kRdzv), dir_, "alone1_" + std::to_string(i));
    const Result r0 = alone0.finish(kTimeout), r1 = alone1.finish(kTimeout);
    EXPECT_EQ(r0.exit_code, 8) << r0.describe();
    EXPECT_NE(r0.err.find("rendezvous incomplete"), std::string::npos) << r0.err;
    EXPECT_NE(r0.err.find("node(s) 1 of 2 never connected to 127.0.0.1:" + std::to_string(port0)), std::string::npos)
        << r0.err;
    EXPECT_EQ(r1.exit_code, 8) << r1.describe();
    EXPECT_NE(r1.err.find("no rendezvous at 127.0.0.1:" + std::to_string(port1) + " within 2 s"), std::string::npos)
        << r1.err;
    // Bounded: the configured timeout plus the launcher's grace and mpirun's teardown.
    EXPECT_GE(r0.seconds, kRdzv - 0.2);
    EXPECT_LT(r0.seconds, kRdzv + 8) << r0.describe();
    EXPECT_GE(r1.seconds, kRdzv - 0.2);
    EXPECT_LT(r1.seconds, kRdzv + 3) << r1.describe();
  }
}

TEST_F(LaunchMpi, NodesThatDisagreeAreRefused) {
  for (int i = 0; i < loops(); ++i) {
    const int port = free_port();
    Process n0({kMtrain, "devices"}, node_env(2, 0, 1, port, 20), dir_, "mismatch0");
    Process n1({kMtrain, "devices"}, node_env(2, 1, 2, port, 20), dir_, "mismatch1");
    const Result r0 = n0.finish(kTimeout), r1 = n1.finish(kTimeout);
    const std::string why = "NPROC_PER_NODE differs: node 1 has 2, node 0 has 1";
    EXPECT_EQ(r0.exit_code, 8) << r0.describe();
    EXPECT_NE(r0.err.find(why), std::string::npos) << r0.err;
    EXPECT_EQ(r1.exit_code, 8) << r1.describe();
    EXPECT_NE(r1.err.find("node 0 refused this node: " + why), std::string::npos) << r1.err;
    EXPECT_LT(r0.seconds, 15) << r0.describe();
  }
}

// Training across two "nodes" on loopback (one rank each, TP=2 spans the
// nodes): both exit 0, the last rank (node 1) logs every iteration once, and
// the losses are those of the single-process run.
TEST_F(LaunchMpi, TwoNodesTrainOneModel) {
  const std::string root = MTRAIN_SOURCE_DIR;
  auto args = [&](const std::string& out) {
    std::vector<std::string> a{kMtrain, "sft", "configs/sft_demo.yaml"};
    std::istringstream flags(
        "--train_iters 3 --lr 3e-4 --lr_decay_iters 2400 --micro_batch_size 2 --global_batch_size 8 "
        "--log_interval 1 --num_threads 1 --num_generate_samples 0");
    for (std::string f; flags >> f;) a.push_back(f);
    a.insert(a.end(), {"--output_dir", (dir_ / out).string()});
    return a;
  };

  const Result single = run(args("single"), {}, dir_, "single", kTimeout, root);
  ASSERT_EQ(single.exit_code, 0) << single.describe();
  const int port = free_port();
  std::vector<std::string> tp = args("nodes");
  tp.insert(tp.end(), {"--tensor_model_parallel_size", "2"});
  Process n0(tp, node_env(2, 0, 1, port, 30), dir_, "train_node0", root);
  Process n1(tp, node_env(2, 1, 1, port, 30), dir_, "train_node1", root);
  const Result r0 = n0.finish(kTimeout), r1 = n1.finish(kTimeout);
  ASSERT_EQ(r0.exit_code, 0) << r0.describe() << "\n=== node 1 ===\n" << r1.describe();
  ASSERT_EQ(r1.exit_code, 0) << r1.describe() << "\n=== node 0 ===\n" << r0.describe();
  EXPECT_EQ(r0.out.find("iteration        1/"), std::string::npos) << "node 0 holds no last rank:\n" << r0.out;
  for (const std::string it : {"1", "2", "3"}) {
    const std::string key = " iteration        " + it + "/       3 |";
    EXPECT_EQ(count_of(r1.out, key), 1) << r1.out;
    // The lm loss field of that line, as printed by the single-process run.
    const size_t a = single.out.find(key), b = r1.out.find(key);
    ASSERT_NE(a, std::string::npos) << single.out;
    auto loss_of = [&](const std::string& out, size_t at) {
      const size_t p = out.find("lm loss: ", at);
      return std::stod(out.substr(p + 9, 12));
    };
    EXPECT_NEAR(loss_of(r1.out, b), loss_of(single.out, a), 1e-5 * loss_of(single.out, a)) << it;
  }
}

// A rank killed with SIGKILL takes the job down, and the report names the rank.
// Each round runs a one-node job and a two-node job side by side.
TEST_F(LaunchMpi, RankDeathEndsTheJob) {
  const std::regex all_ranks_up(R"(rank 1/2 node \d local \d -> npu:\d \(pid (\d+))");
  auto victim_pid = [&](const Process& p) {
    const std::string out = p.stdout_so_far();
    std::smatch m;
    return std::regex_search(out, m, all_ranks_up) ? std::stoi(m[1]) : -1;
  };
  for (int i = 0; i < loops(); ++i) {
    const std::string round = std::to_string(i);
    // One node, two ranks: rank 1 dies.
    Process job({kMtrain, "devices", "--hold", "60"}, {{"NPROC_PER_NODE", "2"}}, dir_, "die1_" + round);
    // Two nodes, one rank each: world rank 1 lives on node 1; node 0 must follow through the launchers' link.
    const int port = free_port();
    Process n0({kMtrain, "devices", "--hold", "60"}, node_env(2, 0, 1, port, 30), dir_, "die2n0_" + round);
    Process n1({kMtrain, "devices", "--hold", "60"}, node_env(2, 1, 1, port, 30), dir_, "die2n1_" + round);
    ASSERT_TRUE(job.wait_for_stdout(all_ranks_up, 30)) << job.stdout_so_far();
    ASSERT_TRUE(n0.wait_for_stdout(all_ranks_up, 30)) << n0.stdout_so_far();
    const auto killed_at = Clock::now();
    ASSERT_EQ(kill(victim_pid(job), SIGKILL), 0);
    ASSERT_EQ(kill(victim_pid(n0), SIGKILL), 0);

    const Result r = job.finish(kTimeout);
    EXPECT_EQ(r.exit_code, 137) << r.describe();
    EXPECT_NE(r.err.find("process rank 1 with PID"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("a rank was killed by signal 9"), std::string::npos) << r.err;

    const Result r0 = n0.finish(kTimeout), r1 = n1.finish(kTimeout);
    EXPECT_EQ(r1.exit_code, 137) << r1.describe();
    EXPECT_NE(r1.err.find("process rank 0 with PID"), std::string::npos) << r1.err;
    EXPECT_EQ(r0.exit_code, 8) << r0.describe();
    EXPECT_NE(r0.err.find("node 1's mpirun failed with exit code 137 (signal 9: Killed)"), std::string::npos) << r0.err;
    // Bounded: OpenMPI's own teardown (about 1 s per mpirun) plus the launchers' link.
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - killed_at).count(), 20);
  }
}

}  // namespace
}  // namespace mtrain::launch_test
