// A stuck or crashed rank never hangs a multi-rank job (reliability.md F6).
// Each case launches `mtrain sft` on 2 ranks the way users do
// (NPROC_PER_NODE=2) and makes rank 1 misbehave at the start of iteration 3
// through the fault-injection seam (MTRAIN_FAULT, lib/train/fault_injection.h):
//   hang: the per-rank watchdog (--distributed_timeout_minutes 0.1 = 6 s)
//         ends the job with exit code 8 and names the rank that saw no progress;
//   exit: the rank ends like a crash, mpirun takes the job down and names rank 1;
// as the control, a healthy TP=2 run with the watchdog armed succeeds and
// prints each training log line once; and errors that differ per rank are
// each printed with their rank.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

constexpr double kBound = 60;  // seconds: far above the 6 s timeout plus OpenMPI's teardown

std::vector<std::string> job(int iters, const fs::path& out, const std::string& extra = "") {
  return concat(concat(demo_sft_args(iters, out), words("--micro_batch_size 2 --global_batch_size 8")), words(extra));
}

RunOptions two_ranks(const std::string& fault = "") {
  RunOptions o;
  o.timeout_seconds = 180;    // a hang that escapes the watchdog fails here instead of blocking ctest
  o.address_space_bytes = 0;  // mpirun and its ranks map large shared-memory segments
  o.env = {{"NPROC_PER_NODE", "2"},
           {"OMPI_MCA_oob_tcp_if_include", "lo"},
           {"OMPI_MCA_btl_tcp_if_include", "lo"},
           {"PMIX_MCA_ptl_base_if_include", "lo"}};
  if (!fault.empty()) o.env.insert(o.env.end(), {{"MTRAIN_FAULT_RANK", "1"}, {"MTRAIN_FAULT", fault}});
  o.unset_env = {"NNODES",       "NODE_RANK",        "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_SIZE",
                 "MTRAIN_FAULT", "MTRAIN_FAULT_RANK"};
  return o;
}

// Iterations that reached the log ("iteration N/" of the training lines).
std::vector<int> logged_iterations(const std::string& out) {
  std::vector<int> its;
  const std::regex re(R"(\] iteration\s+(\d+)/)");
  for (const std::string& l : training_lines(out)) {
    std::smatch m;
    if (std::regex_search(l, m, re)) its.push_back(std::stoi(m[1]));
  }
  return its;
}

using RankFaults = MtrainTest;

TEST_F(RankFaults, HungRankIsEndedByTheWatchdog) {
  const RunResult r = run(job(5, tmp_ / "out", "--distributed_timeout_minutes 0.1"), "hang", two_ranks("hang@3"));
  ASSERT_FALSE(r.timed_out) << r.describe();
  EXPECT_LT(r.seconds, kBound) << r.describe();
  EXPECT_GE(r.seconds, 6.0) << "ended before the watchdog's timeout:\n" << r.describe();
  EXPECT_EQ(r.exit_code, 8) << r.describe();
  EXPECT_TRUE(contains(r.err, "injected fault (MTRAIN_FAULT=hang@3): rank 1 hangs")) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(mtrain: error: rank [01]: no progress for \d+\.\d s \(last: )")))
      << r.err;
  EXPECT_TRUE(contains(r.err, "a peer rank is stuck or dead")) << r.err;
  EXPECT_EQ(logged_iterations(r.out), (std::vector<int>{1, 2})) << r.out;
}

TEST_F(RankFaults, CrashedRankEndsTheJob) {
  const RunResult r = run(job(5, tmp_ / "out"), "exit", two_ranks("exit@3"));
  ASSERT_FALSE(r.timed_out) << r.describe();
  EXPECT_LT(r.seconds, kBound) << r.describe();
  EXPECT_NE(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(contains(r.err, "injected fault (MTRAIN_FAULT=exit@3): rank 1 exits with code 1")) << r.err;
  // mpirun's report: "Process name: [[<job>,1],1]  Exit code: 1" (the last number is the rank).
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(Process name: \[\[\d+,\d+\],1\]\s+Exit code:\s+1)")))
      << "mpirun names rank 1:\n"
      << r.err;
  EXPECT_EQ(r.exit_code, 1) << "the crashed rank's own code comes back";
  EXPECT_TRUE(contains(r.err, "mtrain: launch: mpirun ended with exit code 1")) << r.err;
  EXPECT_EQ(logged_iterations(r.out), (std::vector<int>{1, 2})) << r.out;
}

TEST_F(RankFaults, HealthyTwoRankRunSucceedsWithTheWatchdogArmed) {
  const RunResult r = run(job(3, tmp_ / "out", "--tensor_model_parallel_size 2"), "tp2", two_ranks());
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(logged_iterations(r.out), (std::vector<int>{1, 2, 3})) << "each log line once:\n" << r.out;
  EXPECT_FALSE(contains(r.err, "no progress")) << r.err;
  EXPECT_EQ(train_rows(tmp_ / "out").size(), 3u);
}

// A real run checks the simulated NPUs' budget shape-only before it
// allocates anything: on the 64 MiB test device the demo's activations do
// not fit, and every rank finds so alike, so the verdict (the dry run's,
// with its hint) is printed once, before training. Errors that differ per
// rank are printed by each rank: SaveErrors.DiskFullStopsEveryRankAndKeepsThePreviousCheckpoint.
TEST_F(RankFaults, APlanThatDoesNotFitIsRefusedOnceBeforeTraining) {
  // The demo's own batch (micro-batches of 8).
  const RunResult r =
      run(concat(demo_sft_args(2, tmp_ / "out"), words("--device_profile tiny_test --lr_warmup_iters 0")), "oom",
          two_ranks());
  ASSERT_FALSE(r.timed_out) << r.describe();
  EXPECT_EQ(r.exit_code, 6) << r.describe();
  const std::string verdict = "mtrain: error: the plan does not fit: pipeline stage 0 (ranks 0-1) needs ";
  const size_t at = r.err.find(verdict);
  ASSERT_NE(at, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(verdict, at + 1), std::string::npos) << "printed once:\n" << r.err;
  EXPECT_TRUE(contains(r.err, "  hint: the cheapest change that fits (dry-run checked")) << r.err;
  EXPECT_TRUE(training_lines(r.out).empty()) << r.out;
}

}  // namespace
}  // namespace mtrain::functional
