// The device status files `mtrain npu-smi info` reads: a rank's file appears
// with its accounting and goes away with its publisher; the file of a
// process that is gone is removed by the next reader and not shown; the
// npu-smi table shows a rank's pid and reserved HBM on its device's rows.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "device/npu_smi.h"
#include "device/npu_status.h"

namespace mtrain::device {
namespace {

namespace fs = std::filesystem;

class NpuStatus : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/mtrain_npu_status_XXXXXX";
    ASSERT_NE(mkdtemp(templ), nullptr);
    dir_ = templ;
  }
  void TearDown() override { fs::remove_all(dir_); }

  NpuProcessStatus me(int npu) const {
    NpuProcessStatus s;
    s.npu = npu;
    s.rank = 3;
    s.pid = static_cast<int>(getpid());
    s.start_ticks = process_start_ticks(s.pid);
    s.process_name = "mtrain sft";
    s.profile = "Ascend910B3";
    s.chip_name = "910B3";
    s.hbm_bytes = 64LL << 30;
    return s;
  }
  std::string dir_;
};

TEST_F(NpuStatus, PublishedAccountingIsReadBackAndRemovedWithThePublisher) {
  Device dev(DeviceProfile{}, 2);
  dev.allocate(100LL << 20, MemCategory::kWeights, "w");  // 100 MiB allocated, 100 MiB reserved (2 MiB blocks)
  std::string path;
  {
    NpuStatusPublisher pub(dir_, me(2));
    pub.publish(dev);
    path = pub.path();
    EXPECT_EQ(fs::path(path).filename(), "node0-npu2-" + std::to_string(getpid()) + ".json");
    const auto all = read_npu_status(dir_);
    ASSERT_EQ(all.size(), 1u);
    EXPECT_EQ(all[0].npu, 2);
    EXPECT_EQ(all[0].rank, 3);
    EXPECT_EQ(all[0].pid, getpid());
    EXPECT_EQ(all[0].memory.allocated, 100LL << 20);
    EXPECT_EQ(all[0].memory.reserved, 100LL << 20);
    const std::string table = format_npu_smi_info(DeviceProfile{}, 8, 0, all);
    // Chip rows: HBM-Usage(MB) 100 / 65536 on NPU 2; process row: pid and 100 MB.
    EXPECT_NE(table.find("| 0                         | 0000:03:00.0  | 0           0    / 0          100  / 65536"),
              std::string::npos)
        << table;
    EXPECT_NE(table.find(fmt::format("| 2       0                 | {:<14}| mtrain sft               | 100", getpid())),
              std::string::npos)
        << table;
    EXPECT_NE(table.find("No running processes found in NPU 1 "), std::string::npos);
    EXPECT_EQ(table.find("No running processes found in NPU 2 "), std::string::npos);
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(read_npu_status(dir_).empty());
}

// As npu-smi counts HBM: a process uses its allocator's reserve and what its
// runtime holds (context, collective buffers); the chip adds what the device
// keeps for itself, in use with no process on it too.
TEST_F(NpuStatus, RuntimeMemoryIsTheProcessesAndTheReservationTheChips) {
  DeviceProfile p;
  p.runtime.device_reserved_bytes = 3380LL << 20;
  p.runtime.context_bytes = 199LL << 20;
  p.runtime.library = CollectiveLibrary::kHccl;  // 2 x 200 MB per communicator
  Device dev(p, 2);
  dev.allocate(100LL << 20, MemCategory::kWeights, "w");
  dev.use_communicator("tp", 2);
  NpuStatusPublisher pub(dir_, me(2));
  pub.publish(dev);
  const auto all = read_npu_status(dir_);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].memory.runtime, dev.stats().runtime);
  const std::string table = format_npu_smi_info(p, 8, 0, all);
  // 100 + 199 + 400 MB for the process; 3380 more on its chip; 3380 on an idle chip.
  EXPECT_NE(table.find(fmt::format("| 2       0                 | {:<14}| mtrain sft               | 699 ", getpid())),
            std::string::npos)
      << table;
  EXPECT_NE(table.find(" 4079 / 65536 "), std::string::npos) << table;
  EXPECT_NE(table.find(" 3380 / 65536 "), std::string::npos) << table;
}

TEST_F(NpuStatus, FileOfAProcessThatIsGoneIsRemovedAndNotShown) {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  waitpid(child, nullptr, 0);  // gone (and reaped): its pid names no process now
  NpuProcessStatus dead = me(0);
  dead.pid = child;
  const std::string stale = dir_ + "/node0-npu0-" + std::to_string(child) + ".json";
  {
    Device dev(DeviceProfile{}, 0);
    NpuStatusPublisher pub(dir_, dead);
    pub.publish(dev);
    fs::copy_file(pub.path(), stale + ".keep");
  }
  fs::rename(stale + ".keep", stale);            // what a SIGKILLed rank leaves behind
  std::ofstream(stale + ".tmp") << "{\"pid\":";  // and a half-written temporary file
  // A live process whose start time does not match (its pid was reused) is stale too.
  NpuProcessStatus reused = me(1);
  reused.start_ticks += 1;
  const std::string reused_path = dir_ + "/node0-npu1-" + std::to_string(getpid()) + ".json";
  {
    Device dev(DeviceProfile{}, 1);
    NpuStatusPublisher pub(dir_, reused);
    pub.publish(dev);
    fs::copy_file(pub.path(), reused_path + ".keep");
  }
  fs::rename(reused_path + ".keep", reused_path);
  EXPECT_TRUE(read_npu_status(dir_).empty());
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_FALSE(fs::exists(stale + ".tmp"));
  EXPECT_FALSE(fs::exists(reused_path));
}

TEST(NpuSmiTopo, MatrixAndAffinityOfTheProfilesNode) {
  DeviceProfile p;
  p.cpu_affinity = {{144, 167}, {144, 167}, {96, 119}, {96, 119}, {0, 23}, {0, 23}, {48, 71}, {48, 71}};
  const std::string topo = format_npu_smi_topo(p, 8, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
  EXPECT_NE(topo.find("NPU0       X          HCCS       HCCS       HCCS       HCCS       HCCS       HCCS       HCCS"
                      "       144-167\n"),
            std::string::npos)
      << topo;
  EXPECT_NE(topo.find("NPU4       HCCS       HCCS       HCCS       HCCS       X          HCCS       HCCS       HCCS"
                      "       0-23\n"),
            std::string::npos);
  EXPECT_NE(topo.find("  NPU0: 12-13\n"), std::string::npos) << topo;  // 144-167 x 16/192
}

}  // namespace
}  // namespace mtrain::device
