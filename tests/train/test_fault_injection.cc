// The fault-injection test seam (train/fault_injection.h): MTRAIN_FAULT and
// MTRAIN_FAULT_RANK values are parsed strictly; unset means no fault; a save
// fault bites only in the save of its iteration on its rank.
#include <gtest/gtest.h>

#include <cerrno>

#include "../common/fs_test_util.h"
#include "common/errors.h"
#include "train/fault_injection.h"

namespace mtrain::train {
namespace {

TEST(FaultInjection, UnsetOrEmptyMeansNoFault) {
  EXPECT_FALSE(parse_injected_fault(nullptr, nullptr));
  EXPECT_FALSE(parse_injected_fault("1", nullptr));
  EXPECT_FALSE(parse_injected_fault("1", ""));
}

TEST(FaultInjection, ParsesKindIterationAndRank) {
  const auto hang = parse_injected_fault("1", "hang@3");
  ASSERT_TRUE(hang);
  EXPECT_EQ(hang->kind, InjectedFault::Kind::kHang);
  EXPECT_EQ(hang->iteration, 3);
  EXPECT_EQ(hang->rank, 1);
  const auto exit = parse_injected_fault(nullptr, "exit@12");
  ASSERT_TRUE(exit);
  EXPECT_EQ(exit->kind, InjectedFault::Kind::kExit);
  EXPECT_EQ(exit->iteration, 12);
  EXPECT_EQ(exit->rank, 0) << "MTRAIN_FAULT_RANK defaults to 0";
}

TEST(FaultInjection, ParsesSaveFaults) {
  using Kind = InjectedFault::Kind;
  using Point = InjectedFault::SavePoint;
  for (const auto& [spec, point] :
       {std::pair{"save_kill@20:shard", Point::kShard}, std::pair{"save_kill@20:rename", Point::kRename},
        std::pair{"save_kill@20:tracker", Point::kTracker}}) {
    const auto f = parse_injected_fault(nullptr, spec);
    ASSERT_TRUE(f) << spec;
    EXPECT_EQ(f->kind, Kind::kSaveKill) << spec;
    EXPECT_EQ(f->point, point) << spec;
    EXPECT_EQ(f->iteration, 20) << spec;
    EXPECT_TRUE(f->in_save()) << spec;
  }
  const auto enospc = parse_injected_fault("1", "save_enospc@10");
  ASSERT_TRUE(enospc);
  EXPECT_EQ(enospc->kind, Kind::kSaveEnospc);
  EXPECT_EQ(enospc->rank, 1);
  const auto hang = parse_injected_fault(nullptr, "save_hang@5");
  ASSERT_TRUE(hang);
  EXPECT_EQ(hang->kind, Kind::kSaveHang);
  EXPECT_EQ(hang->iteration, 5);
  EXPECT_FALSE(parse_injected_fault(nullptr, "hang@5")->in_save());
}

TEST(FaultInjection, MalformedValuesAreUsageErrors) {
  for (const char* bad :
       {"hang", "hang@", "hang@x", "hang@0", "hang@-1", "crash@3", "exit@3x", "@3", "hang@3:shard", "save_kill@20",
        "save_kill@20:", "save_kill@20:disk", "save_kill@:shard", "save_enospc@10:shard", "save_hang@0"}) {
    try {
      parse_injected_fault("0", bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("MTRAIN_FAULT=") + bad), std::string::npos) << e.what();
    }
  }
  for (const char* bad : {"-1", "x", "1.5", " 1"}) {
    EXPECT_THROW(parse_injected_fault(bad, "exit@1"), UsageError) << bad;
  }
  // Only rank 0 renames the checkpoint and replaces the tracker.
  EXPECT_THROW(parse_injected_fault("1", "save_kill@20:rename"), UsageError);
  EXPECT_THROW(parse_injected_fault("1", "save_kill@20:tracker"), UsageError);
  EXPECT_TRUE(parse_injected_fault("1", "save_kill@20:shard"));
}

// Writes one byte to `path` through `fs`; the errno of the IoError, or 0.
int write_errno(FileSystem& fs, const std::string& path) {
  try {
    fs.open_for_write(path)->append(std::string_view("x"));
  } catch (const IoError& e) {
    return e.error_number();
  }
  return 0;
}

TEST(SaveFaultFileSystem, DiskFullBitesOnceInTheFaultsIterationOnItsRank) {
  testing::TempDir tmp;
  const auto fault = parse_injected_fault("1", "save_enospc@10");
  const std::unique_ptr<FileSystem> fs = checkpoint_file_system(fault);
  FaultInjectionHook rank0(*fault, 0, *fs), rank1(*fault, 1, *fs);
  rank1.on_step_begin(9);
  EXPECT_EQ(write_errno(*fs, tmp / "a"), 0) << "not armed before iteration 10";
  rank0.on_step_begin(10);
  EXPECT_EQ(write_errno(*fs, tmp / "b"), 0) << "rank 0 does not arm it";
  rank1.on_step_begin(10);
  EXPECT_EQ(write_errno(*fs, tmp / "c"), ENOSPC);
  EXPECT_EQ(write_errno(*fs, tmp / "d"), 0) << "only the first write of the save fails";
  EXPECT_TRUE(fs->exists(tmp / "d"));
}

TEST(SaveFaultFileSystem, OtherFaultsUseTheRealFileSystem) {
  EXPECT_TRUE(dynamic_cast<PosixFileSystem*>(checkpoint_file_system(std::nullopt).get()));
  EXPECT_TRUE(dynamic_cast<PosixFileSystem*>(checkpoint_file_system(parse_injected_fault("0", "hang@3")).get()));
  EXPECT_TRUE(
      dynamic_cast<SaveFaultFileSystem*>(checkpoint_file_system(parse_injected_fault("0", "save_hang@3")).get()));
}

}  // namespace
}  // namespace mtrain::train
