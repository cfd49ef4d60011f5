// `mtrain npu-smi info` against real training processes, and CPU_AFFINITY_CONF
// as the kernel sees it (/proc/<pid>/task/<tid>/status, Cpus_allowed_list).
// A rank is kept alive with the test seam MTRAIN_FAULT=hang@2 (it stops at
// the start of iteration 2, after logging iteration 1 and its memory line), inspected,
// then killed with SIGKILL like a crashed rank.
#include <cmath>

#include "background_runner.h"

namespace mtrain::functional {
namespace {

// npu-smi's process row of NPU 0 for `pid` using `mb` MB, and the HBM-Usage cell "<mb> / 65536".
std::string process_row(pid_t pid, long mb) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "| 0       0                 | %-14d| mtrain sft               | %-24ld|", pid, mb);
  return buf;
}
std::string hbm_cell(long mb) {
  char buf[64];
  std::snprintf(buf, sizeof buf, " %-4ld / 65536 ", mb);
  return buf;
}

class NpuSmi : public MtrainTest {
 protected:
  std::vector<std::string> hanging_job(const std::string& threads = "1") {
    return concat(words("sft configs/sft_demo.yaml --train_iters 5 --lr_decay_iters 2400 --log_interval 1 "
                        "--num_generate_samples 0 --num_threads " +
                        threads),
                  {"--output_dir", (tmp_ / "out").string()});
  }
  std::vector<std::pair<std::string, std::string>> env(const std::string& affinity = "0") {
    return {{"MTRAIN_FAULT", "hang@2"}, {"MTRAIN_NPU_STATUS_DIR", status_dir()}, {"CPU_AFFINITY_CONF", affinity}};
  }
  std::string status_dir() const { return (tmp_ / "npu-status").string(); }
  RunResult npu_smi() {
    RunOptions o;
    o.env = {{"MTRAIN_NPU_STATUS_DIR", status_dir()}};
    return run({"npu-smi", "info"}, "npu_smi", o);
  }
};

TEST_F(NpuSmi, ShowsALiveRanksHbmAndForgetsItOnceKilled) {
  Background rank;
  start(rank, hanging_job(), tmp_, env());
  ASSERT_TRUE(wait_for_output(rank, "hangs at the start of iteration 2")) << read_text(rank.out);
  // The reference: Megatron's memory line of the last logged iteration (MB = 2^20 bytes).
  double reserved_mb = -1;
  for (const std::string& l : lines_of(read_text(rank.out)))
    if (contains(l, "(after 1 iterations) memory (MB)")) reserved_mb = std::stod(field(l, "reserved"));
  ASSERT_GT(reserved_mb, 0) << read_text(rank.out);
  // npu-smi adds what the runtime holds beside the allocator: the process's CANN context (199 MB in
  // configs/devices/Ascend910B3.yaml; one rank: no communicator) and, on the chip, the device's own 3380 MB.
  const long mb = std::lround(std::ceil(reserved_mb)) + 199;
  const RunResult live = npu_smi();
  ASSERT_EQ(live.exit_code, 0) << live.describe();
  EXPECT_TRUE(contains(live.out, process_row(rank.pid, mb))) << live.out;
  EXPECT_TRUE(contains(live.out, hbm_cell(mb + 3380))) << live.out;
  EXPECT_FALSE(contains(live.out, "No running processes found in NPU 0 ")) << live.out;

  rank.stop();  // SIGKILL: no chance to remove its file
  ASSERT_EQ(std::distance(fs::directory_iterator(status_dir()), fs::directory_iterator()), 1);
  const RunResult after = npu_smi();
  ASSERT_EQ(after.exit_code, 0) << after.describe();
  EXPECT_TRUE(contains(after.out, "No running processes found in NPU 0 ")) << after.out;
  EXPECT_FALSE(contains(after.out, hbm_cell(mb + 3380))) << after.out;
  EXPECT_TRUE(contains(after.out, hbm_cell(3380))) << after.out;  // the idle device's own
  EXPECT_EQ(std::distance(fs::directory_iterator(status_dir()), fs::directory_iterator()), 0);
}

TEST_F(NpuSmi, FinishedRunLeavesNoStatusFile) {
  RunOptions o;
  o.env = {{"MTRAIN_NPU_STATUS_DIR", status_dir()}};
  const RunResult r = run(concat(words("sft configs/sft_demo.yaml --train_iters 2 --lr_warmup_iters 0 "
                                       "--num_generate_samples 0 --num_threads 1"),
                                 {"--output_dir", (tmp_ / "out").string()}),
                          "run", o);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  ASSERT_TRUE(fs::is_directory(status_dir()));                                                  // it was published ...
  EXPECT_EQ(std::distance(fs::directory_iterator(status_dir()), fs::directory_iterator()), 0);  // ... and removed
}

TEST_F(NpuSmi, CoarseBindingPutsEveryThreadOnTheNpusCores) {
  Background rank;
  start(rank, hanging_job(), tmp_, env("1,npu0:0-0"));
  ASSERT_TRUE(wait_for_output(rank, "hangs at the start of iteration 2")) << read_text(rank.out);
  const auto threads = cpus_allowed(rank.pid);
  ASSERT_GE(threads.size(), 1u);
  for (const auto& [tid, cpus] : threads) EXPECT_EQ(cpus, "0") << "thread " << tid;
  EXPECT_TRUE(contains(read_text(rank.out), "CPU_AFFINITY_CONF mode 1: every thread on cores 0 (npu0:0-0"));
}

TEST_F(NpuSmi, FineBindingPinsTheMainAndComputeThreads) {
  if (allowed_core_count() < 2) GTEST_SKIP() << "needs 2 cores";
  Background rank;
  start(rank, hanging_job("2"), tmp_, env("2,npu0:0-1"));
  ASSERT_TRUE(wait_for_output(rank, "hangs at the start of iteration 2")) << read_text(rank.out);
  const auto threads = cpus_allowed(rank.pid);
  ASSERT_TRUE(threads.count(rank.pid));
  EXPECT_EQ(threads.at(rank.pid), "0");  // the main thread: the range's first core
  int on_core_1 = 0;
  for (const auto& [tid, cpus] : threads) {
    EXPECT_TRUE(cpus == "0" || cpus == "1" || cpus == "0-1") << "thread " << tid << ": " << cpus;
    on_core_1 += cpus == "1";
  }
  EXPECT_EQ(on_core_1, 1);  // OpenMP thread 1 (OpenBLAS's second thread)
}

TEST_F(NpuSmi, DevicesShowsTheBindingARunWouldMake) {
  if (allowed_core_count() < 2) GTEST_SKIP() << "needs 2 cores";
  RunOptions o;
  o.env = {{"CPU_AFFINITY_CONF", "2,npu0:0-1"}};
  const RunResult fine = run({"devices"}, "fine", o);
  ASSERT_EQ(fine.exit_code, 0) << fine.describe();
  // One compute thread per core of the range; the main thread on its first core.
  EXPECT_TRUE(contains(fine.out, "-> npu:0 (pid ")) << fine.out;
  EXPECT_TRUE(contains(fine.out, ", threads 2, cpus 0)\n")) << fine.out;
  o.env = {{"CPU_AFFINITY_CONF", "1,npu0:1-1"}};
  const RunResult coarse = run({"devices"}, "coarse", o);
  EXPECT_TRUE(contains(coarse.out, ", threads 1, cpus 1)\n")) << coarse.out;
}

TEST_F(NpuSmi, MalformedAffinityIsAConfigErrorBeforeTraining) {
  RunOptions o;
  o.env = {{"CPU_AFFINITY_CONF", "1,npu0:5-2"}, {"MTRAIN_NPU_STATUS_DIR", status_dir()}};
  const RunResult r = run(hanging_job(), "bad", o);
  EXPECT_EQ(r.exit_code, 3) << r.describe();
  EXPECT_TRUE(contains(r.err, "CPU_AFFINITY_CONF=1,npu0:5-2: 'npu0:5-2': the first core 5 is after the last core 2"))
      << r.err;
  EXPECT_FALSE(contains(r.out, "iteration")) << r.out;
}

}  // namespace
}  // namespace mtrain::functional
