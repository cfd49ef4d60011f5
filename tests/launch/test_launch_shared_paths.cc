// A multi-node run whose save, load or profile directory is not one
// directory on every node is refused before any data is read or any step is
// trained (lib/train/shared_paths.h), on two "nodes" on loopback (ctest label
// mpi). The nodes differ by working directory, so one relative path names two
// directories, as node-local disks would.
#include <gtest/gtest.h>
#include <unistd.h>

#include "launch_runner.h"

namespace mtrain::launch_test {
namespace {

const std::string kMtrain = MTRAIN_BIN;
const std::string kRoot = MTRAIN_SOURCE_DIR;
constexpr double kTimeout = 60;  // per process: far above any expected run, below the ctest TIMEOUT

class SharedPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mtrain_shared_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ / "cwd0");
    fs::create_directories(dir_ / "cwd1");
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  fs::path dir_;
};

// A 3-iteration TP=2 demo job (one rank per node) with absolute data paths,
// so it runs from any working directory.
std::vector<std::string> demo_job(const std::string& output_dir, const std::string& extra = "") {
  std::vector<std::string> a{kMtrain,
                             "sft",
                             kRoot + "/configs/sft_demo.yaml",
                             "--tokenizer",
                             kRoot + "/configs/demo/tokenizer.json",
                             "--dataset",
                             kRoot + "/configs/demo/sft.jsonl",
                             "--output_dir",
                             output_dir};
  std::istringstream flags(
      "--train_iters 3 --lr_decay_iters 2400 --micro_batch_size 2 --global_batch_size 8 "
      "--log_interval 1 --num_threads 1 --num_generate_samples 0 "
      "--tensor_model_parallel_size 2 " +
      extra);
  for (std::string f; flags >> f;) a.push_back(f);
  return a;
}

// Both nodes' results; node 0 (rank 0) prints the one message. Node k runs in <dir>/cwd<k>.
struct TwoNodes {
  Result n0, n1;
};
TwoNodes run_two_nodes(const std::vector<std::string>& job0, const std::vector<std::string>& job1, const fs::path& dir,
                       const std::string& tag) {
  const int port = free_port();
  Process p0(job0, node_env(2, 0, 1, port, 30), dir, tag + "0", dir / "cwd0");
  Process p1(job1, node_env(2, 1, 1, port, 30), dir, tag + "1", dir / "cwd1");
  TwoNodes r{p0.finish(kTimeout), p1.finish(kTimeout)};
  // Nothing was trained, on either node, and both stop alike.
  EXPECT_EQ(r.n1.exit_code, r.n0.exit_code) << r.n1.describe();
  EXPECT_EQ(r.n0.out.find("] iteration "), std::string::npos) << r.n0.out;
  EXPECT_EQ(r.n1.out.find("] iteration "), std::string::npos) << r.n1.out;
  return r;
}

const std::string kSaveHint =
    "a shared file system is required, as in Megatron; point --output_dir (--save) at a directory every node sees";

// Different --output_dir strings: refused before the data is read, naming each
// node's path.
TEST_F(SharedPaths, DifferentSaveDirectoriesAreRefusedBeforeTraining) {
  const TwoNodes r = run_two_nodes(demo_job((dir_ / "a").string()), demo_job((dir_ / "b").string()), dir_, "strings");
  EXPECT_EQ(r.n0.exit_code, 8) << r.n0.describe() << "\n=== node 1 ===\n" << r.n1.describe();
  EXPECT_NE(r.n0.err.find("--output_dir (--save) differs between the ranks:\n  node 0 on "), std::string::npos)
      << r.n0.err;
  EXPECT_NE(r.n0.err.find(", rank 0: " + (dir_ / "a").string()), std::string::npos) << r.n0.err;
  EXPECT_NE(r.n0.err.find(", rank 1: " + (dir_ / "b").string()), std::string::npos) << r.n0.err;
  EXPECT_NE(r.n0.err.find(kSaveHint), std::string::npos) << r.n0.err;
  EXPECT_EQ(r.n0.out.find("> data:"), std::string::npos) << "read the data first:\n" << r.n0.out;
}

// The same relative path from different working directories: the probe file
// rank 0 writes is not where node 1 looks. Rank 0 removes it afterwards.
TEST_F(SharedPaths, ASaveDirectoryNotSharedByTheNodesIsFoundByTheProbe) {
  const TwoNodes r = run_two_nodes(demo_job("out"), demo_job("out"), dir_, "probe");
  EXPECT_EQ(r.n0.exit_code, 8) << r.n0.describe() << "\n=== node 1 ===\n" << r.n1.describe();
  EXPECT_NE(r.n0.err.find("--output_dir (--save) out is not the same directory on every node: rank 0 (node 0 on "),
            std::string::npos)
      << r.n0.err;
  EXPECT_NE(r.n0.err.find("\n  node 1 on "), std::string::npos) << r.n0.err;
  EXPECT_NE(r.n0.err.find(", rank 1: does not see the probe file out/.mtrain_shared_probe_"), std::string::npos)
      << r.n0.err;
  EXPECT_NE(r.n0.err.find(kSaveHint), std::string::npos) << r.n0.err;
  for (const auto& e : fs::directory_iterator(dir_ / "cwd0" / "out"))
    EXPECT_EQ(e.path().filename().string().rfind(".mtrain_shared_probe_", 0), std::string::npos) << e.path();
}

// --load: every rank must see the same checkpoint (only the tracker is read
// at this point); the save directory is shared here.
TEST_F(SharedPaths, ALoadDirectoryNotSharedIsRefusedBeforeTraining) {
  fs::create_directories(dir_ / "cwd0" / "ckpt");
  std::ofstream(dir_ / "cwd0" / "ckpt" / "latest_checkpointed_iteration.txt") << "5";
  const std::vector<std::string> job = demo_job((dir_ / "shared_out").string(), "--load ckpt");
  const TwoNodes r = run_two_nodes(job, job, dir_, "load");
  EXPECT_EQ(r.n0.exit_code, 8) << r.n0.describe();
  EXPECT_NE(r.n0.err.find("--load ckpt: the ranks see different checkpoints:"), std::string::npos) << r.n0.err;
  EXPECT_NE(r.n0.err.find(", rank 0: latest_checkpointed_iteration.txt says \"5\""), std::string::npos) << r.n0.err;
  EXPECT_NE(r.n0.err.find(", rank 1: no latest_checkpointed_iteration.txt"), std::string::npos) << r.n0.err;
  EXPECT_NE(r.n0.err.find("point --load at a directory every node sees"), std::string::npos) << r.n0.err;
}

// --profile_save_path when both ranks are profiled: the merged trace reads
// every rank's file.
TEST_F(SharedPaths, AProfileDirectoryNotSharedIsRefusedWhenTracesAreMerged) {
  const std::vector<std::string> job = demo_job(
      (dir_ / "shared_out").string(), "--profile --profile_step_start 1 --profile_step_end 2 --profile_save_path prof");
  const TwoNodes r = run_two_nodes(job, job, dir_, "prof");
  EXPECT_EQ(r.n0.exit_code, 8) << r.n0.describe();
  EXPECT_NE(r.n0.err.find("--profile_save_path prof is not the same directory on every node"), std::string::npos)
      << r.n0.err;
  EXPECT_NE(r.n0.err.find("point --profile_save_path at a directory every node sees"), std::string::npos) << r.n0.err;
}

}  // namespace
}  // namespace mtrain::launch_test
