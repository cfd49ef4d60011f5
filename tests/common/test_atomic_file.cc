// Atomic replacement under injected faults: ENOSPC/EIO at every step leaves
// the old file intact and no temp behind; a kill after any number of bytes
// (simulated, and a real SIGKILL in a child process) leaves the old or the
// complete new file; a power loss keeps the new file because it was fsynced
// before the rename. The fault file system itself is checked to really bite.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "common/atomic_file.h"
#include "common/fault_file_system.h"
#include "fs_test_util.h"

namespace mtrain {
namespace {

using testing::slurp;
using testing::TempDir;

const std::string kOld = "old contents\n";
const std::string kNew(10000, 'n');

struct Fixture {
  TempDir tmp;
  PosixFileSystem posix;
  std::string target = tmp / "file.txt";
  Fixture() { write_file_atomic(posix, target, kOld); }
};

TEST(AtomicFile, WritesContentsWithModeAndNoTemp) {
  Fixture fx;
  testing::ScopedUmask mask(0);
  write_file_atomic(fx.posix, fx.target, kNew);
  EXPECT_EQ(slurp(fx.target), kNew);
  EXPECT_EQ(testing::mode_of(fx.target), 0640u);
  EXPECT_FALSE(fx.posix.exists(temp_path_for(fx.target)));
  write_file_atomic(fx.posix, fx.target, "x", 0600);
  EXPECT_EQ(testing::mode_of(fx.target), 0600u);
}

TEST(AtomicFile, FsyncsBeforeRenameAndTheDirectoryAfter) {
  Fixture fx;
  FaultInjectingFileSystem fs(fx.posix);
  write_file_atomic(fs, fx.target, kNew);
  const std::string tmp = temp_path_for(fx.target);
  const std::vector<std::string> expected = {
      "open_write " + tmp,
      "write " + tmp + " 10000",
      "fsync " + tmp,
      "close " + tmp,
      "rename " + tmp + " -> " + fx.target,
      "sync_dir " + fx.tmp.path(),
  };
  EXPECT_EQ(fs.log(), expected);
}

// Every step of the protocol failing, with ENOSPC and EIO.
TEST(AtomicFile, AnyFailureBeforeTheRenameKeepsTheOldFileAndRemovesTheTemp) {
  for (FsOp op : {FsOp::kOpenWrite, FsOp::kWrite, FsOp::kSync, FsOp::kClose, FsOp::kRename}) {
    for (int err : {ENOSPC, EIO}) {
      Fixture fx;
      FaultInjectingFileSystem fs(fx.posix);
      fs.fail(op, 1, err);
      try {
        write_file_atomic(fs, fx.target, kNew);
        ADD_FAILURE() << fs_op_name(op) << ": no error";
      } catch (const IoError& e) {
        EXPECT_EQ(e.error_number(), err);
        EXPECT_EQ(e.path(), temp_path_for(fx.target)) << e.what();
        EXPECT_NE(std::string(e.what()).find(std::strerror(err)), std::string::npos) << e.what();
      }
      EXPECT_EQ(slurp(fx.target), kOld) << fs_op_name(op);
      EXPECT_FALSE(fx.posix.exists(temp_path_for(fx.target))) << fs_op_name(op);
    }
  }
}

TEST(AtomicFile, DiskFullOnTheKthWriteOfABody) {
  Fixture fx;
  FaultInjectingFileSystem fs(fx.posix);
  fs.fail(FsOp::kWrite, 3, ENOSPC);
  int chunks = 0;
  EXPECT_THROW(write_file_atomic(fs, fx.target,
                                 [&](WritableFile& f) {
                                   for (; chunks < 10; ++chunks) f.append(std::string_view(kNew));
                                 }),
               IoError);
  EXPECT_EQ(chunks, 2);  // the third append failed
  EXPECT_EQ(slurp(fx.target), kOld);
  EXPECT_FALSE(fx.posix.exists(temp_path_for(fx.target)));
}

TEST(AtomicFile, AnExceptionFromTheBodyAlsoRemovesTheTemp) {
  Fixture fx;
  EXPECT_THROW(write_file_atomic(fx.posix, fx.target,
                                 [](WritableFile& f) {
                                   f.append(std::string_view("partial"));
                                   throw std::runtime_error("bad tensor");
                                 }),
               std::runtime_error);
  EXPECT_EQ(slurp(fx.target), kOld);
  EXPECT_FALSE(fx.posix.exists(temp_path_for(fx.target)));
}

TEST(AtomicFile, KilledAfterAnyNumberOfBytesLeavesTheOldFile) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{4096}, int64_t{9999}}) {
    Fixture fx;
    FaultInjectingFileSystem fs(fx.posix);
    fs.crash_after_bytes(n);
    EXPECT_THROW(write_file_atomic(fs, fx.target, kNew), SimulatedCrash);
    EXPECT_TRUE(fs.crashed());
    EXPECT_EQ(slurp(fx.target), kOld) << n;
    // Like a real kill: the partial temp stays (nobody was left to remove it) ...
    EXPECT_EQ(slurp(temp_path_for(fx.target)), kNew.substr(0, n));
    // ... and the next writer reuses its name.
    write_file_atomic(fx.posix, fx.target, kNew);
    EXPECT_EQ(slurp(fx.target), kNew);
    EXPECT_FALSE(fx.posix.exists(temp_path_for(fx.target)));
  }
}

TEST(AtomicFile, ARealSigkillMidWriteLeavesTheOldFile) {
  Fixture fx;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    FaultInjectingFileSystem fs(fx.posix);
    fs.crash_after_bytes(5000, FaultInjectingFileSystem::CrashAction::kKill);
    try {
      write_file_atomic(fs, fx.target, kNew);
    } catch (...) {
    }
    ::_exit(0);  // not reached when the kill works
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "status " << status;
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  EXPECT_EQ(slurp(fx.target), kOld);
  EXPECT_EQ(fx.posix.file_size(temp_path_for(fx.target)), 5000);
}

TEST(AtomicFile, PowerLossAfterTheWriteKeepsTheNewFile) {
  Fixture fx;
  FaultInjectingFileSystem fs(fx.posix);
  write_file_atomic(fs, fx.target, kNew);
  fs.drop_unsynced_data();
  EXPECT_EQ(slurp(fx.target), kNew);
}

TEST(FaultFileSystem, PowerLossReallyDropsUnsyncedData) {
  // The control for the test above: without fsync the data is gone.
  Fixture fx;
  FaultInjectingFileSystem fs(fx.posix);
  auto f = fs.open_for_write(fx.tmp / "unsynced");
  f->append(std::string_view("lost"));
  f->close();
  auto g = fs.open_for_write(fx.tmp / "half");
  g->append(std::string_view("kept"));
  g->sync();
  g->append(std::string_view("lost"));
  g->close();
  fs.drop_unsynced_data();
  EXPECT_EQ(slurp(fx.tmp / "unsynced"), "");
  EXPECT_EQ(slurp(fx.tmp / "half"), "kept");
}

TEST(FaultFileSystem, RulesCountCallsPerOpAndPath) {
  Fixture fx;
  FaultInjectingFileSystem fs(fx.posix);
  fs.fail(FsOp::kWrite, 2, EIO, "b.bin");
  auto a = fs.open_for_write(fx.tmp / "a.bin");
  auto b = fs.open_for_write(fx.tmp / "b.bin");
  a->append(std::string_view("1"));
  b->append(std::string_view("1"));
  a->append(std::string_view("2"));  // a's writes do not count for the b.bin rule
  EXPECT_THROW(b->append(std::string_view("2")), IoError);
  b->append(std::string_view("3"));  // only the 2nd call fails
  EXPECT_EQ(fs.calls(FsOp::kWrite), 5);
  EXPECT_EQ(fs.bytes_written(), 4);
}

TEST(FaultFileSystem, CrashAtTheNthCallOnANameRunsNothingFromThereOn) {
  Fixture fx;
  FaultInjectingFileSystem fs(fx.posix);
  fs.crash_at(FsOp::kRename, 2, "file.txt.tmp");
  fs.rename(fx.target, fx.tmp / "moved.txt");  // another name: not counted
  fs.rename(fx.tmp / "moved.txt", fx.target);
  write_file_atomic(fs, fx.target, "first");  // the 1st rename of file.txt.tmp
  EXPECT_THROW(write_file_atomic(fs, fx.target, kNew), SimulatedCrash);
  EXPECT_TRUE(fs.crashed());
  EXPECT_EQ(slurp(fx.target), "first") << "the crashing rename did not run";
  EXPECT_EQ(slurp(temp_path_for(fx.target)), kNew) << "what came before it did";
  EXPECT_EQ(fs.log().back(), "crash " + temp_path_for(fx.target));
}

TEST(FaultFileSystem, EveryCallAfterACrashThrows) {
  Fixture fx;
  FaultInjectingFileSystem fs(fx.posix);
  fs.crash_after_bytes(2);
  auto f = fs.open_for_write(fx.tmp / "x");
  EXPECT_THROW(f->append(std::string_view("abc")), SimulatedCrash);
  EXPECT_THROW(f->sync(), SimulatedCrash);
  EXPECT_THROW(fs.exists(fx.target), SimulatedCrash);
  EXPECT_THROW(fs.remove_all(fx.tmp / "x"), SimulatedCrash);
  EXPECT_EQ(slurp(fx.tmp / "x"), "ab");
}

TEST(SmallTextFile, TrackerRoundTripAndBounds) {
  Fixture fx;
  const std::string tracker = fx.tmp / "latest_checkpointed_iteration.txt";
  replace_text_file_atomic(fx.posix, tracker, "100");
  EXPECT_EQ(read_small_text_file(fx.posix, tracker), "100");
  replace_text_file_atomic(fx.posix, tracker, "200");
  EXPECT_EQ(read_small_text_file(fx.posix, tracker), "200");
  EXPECT_THROW(replace_text_file_atomic(fx.posix, tracker, std::string(5000, '1')), IoError);
  EXPECT_THROW(replace_text_file_atomic(fx.posix, tracker, std::string("1\0", 2)), IoError);
  EXPECT_EQ(read_small_text_file(fx.posix, tracker), "200");
  // A garbage tracker (binary, huge) is refused when read.
  testing::put(tracker, std::string("\x00\x01", 2));
  EXPECT_THROW(read_small_text_file(fx.posix, tracker), IoError);
  testing::put(tracker, std::string(100000, '7'));
  EXPECT_THROW(read_small_text_file(fx.posix, tracker), IoError);
  EXPECT_THROW(read_small_text_file(fx.posix, fx.tmp / "missing"), IoError);
}

}  // namespace
}  // namespace mtrain
