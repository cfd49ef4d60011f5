// Two ranks of one launch (NPROC_PER_NODE=2, mpirun): `mtrain npu-smi info`
// lists both on their devices, CPU_AFFINITY_CONF binds each rank to its
// NPU's core (the launcher leaves binding to the ranks), and once the job
// is killed the next npu-smi shows the devices free again.
#include "background_runner.h"

namespace mtrain::functional {
namespace {

class NpuSmiRanks : public MtrainTest {};

TEST_F(NpuSmiRanks, BothRanksShownAndEachBoundToItsNpusCore) {
  if (allowed_core_count() < 2) GTEST_SKIP() << "needs 2 cores";
  const std::string status_dir = (tmp_ / "npu-status").string();
  RunOptions launch = launch_ranks(2);
  launch.env.push_back({"MTRAIN_NPU_STATUS_DIR", status_dir});
  launch.env.push_back({"CPU_AFFINITY_CONF", "1,npu0:0-0,npu1:1-1"});
  launch.env.push_back({"MTRAIN_FAULT", "hang@2"});  // rank 0 stops; rank 1 waits for it in a collective
  Background job;
  for (const auto& k : launch.unset_env) unsetenv(k.c_str());  // this test process's own copy only
  start(job,
        concat(words("sft configs/sft_demo.yaml --train_iters 5 --lr_decay_iters 2400 --log_interval 1 "
                     "--num_generate_samples 0"),
               {"--output_dir", (tmp_ / "out").string()}),
        tmp_, launch.env);
  ASSERT_TRUE(wait_for_output(job, "hangs at the start of iteration 2")) << read_text(job.out);
  EXPECT_TRUE(contains(read_text(job.out), "--bind-to none")) << read_text(job.out);

  RunOptions o;
  o.env = {{"MTRAIN_NPU_STATUS_DIR", status_dir}};
  const RunResult live = run({"npu-smi", "info"}, "live", o);
  ASSERT_EQ(live.exit_code, 0) << live.describe();
  std::map<int, int> pid_of_npu;  // from the process table: "| <npu>       0                 | <pid> ..."
  for (const std::string& l : lines_of(live.out)) {
    const auto w = words(l);
    if (w.size() > 6 && w[0] == "|" && w[2] == "0" && w[3] == "|" && w[5] == "|" && w[6] == "mtrain")
      pid_of_npu[std::stoi(w[1])] = std::stoi(w[4]);
  }
  ASSERT_EQ(pid_of_npu.size(), 2u) << live.out;
  ASSERT_TRUE(pid_of_npu.count(0) && pid_of_npu.count(1)) << live.out;
  for (const auto& [npu, pid] : pid_of_npu) {
    for (const auto& [tid, cpus] : cpus_allowed(pid))
      EXPECT_EQ(cpus, std::to_string(npu)) << "npu " << npu << " thread " << tid;
  }

  job.stop();  // SIGKILL to the launcher: mpirun gets SIGTERM and ends the ranks
  std::string out;
  for (int i = 0; i < 300; ++i) {  // the ranks end within moments; a killed rank's file stays until read
    out = run({"npu-smi", "info"}, "after", o).out;
    if (contains(out, "No running processes found in NPU 0 ") && contains(out, "No running processes found in NPU 1 "))
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(contains(out, "No running processes found in NPU 0 ")) << out;
  EXPECT_TRUE(contains(out, "No running processes found in NPU 1 ")) << out;
  EXPECT_EQ(std::distance(fs::directory_iterator(status_dir), fs::directory_iterator()), 0);
}

}  // namespace
}  // namespace mtrain::functional
