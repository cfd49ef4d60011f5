// write_safetensors / SafetensorsFile under injected faults: disk full and
// I/O errors mid-write give a CheckpointError naming the path and the bytes,
// remove the temp file and keep the previous file loadable; a kill after any
// number of bytes keeps the previous file; read errors name the file; a
// flipped data byte passes the header checks but not the manifest digest.
#include <gtest/gtest.h>

#include <cerrno>

#include "checkpoint/safetensors.h"
#include "common/atomic_file.h"
#include "common/fault_file_system.h"
#include "fmt/format.h"
#include "safetensors_test_util.h"
#include "tensor/precision.h"

namespace mtrain::checkpoint {
namespace {

using testing::checkpoint_error_of;
using testing::TempDir;

constexpr int64_t kN = 100000;  // BF16 elements: four conversion chunks, so several writes

struct Fixture {
  TempDir tmp;
  PosixFileSystem posix;
  std::string path = tmp / "model.safetensors";
  std::vector<float> old_values = testing::random_floats(kN, 1);
  std::vector<float> new_values = testing::random_floats(kN, 2);
  Fixture() { write(posix, old_values); }

  WrittenFile write(FileSystem& fs, const std::vector<float>& v) {
    const std::vector<TensorToWrite> t = {TensorToWrite::from_f32("w", {kN}, v.data(), StDType::kBF16)};
    return write_safetensors(fs, path, t, {{"step", &v == &old_values ? "old" : "new"}});
  }
  // The file at `path` opens, validates and holds the old tensor.
  void expect_old_file_intact() {
    SafetensorsFile f = SafetensorsFile::open(posix, path);
    EXPECT_EQ(f.metadata().at("step"), "old");
    std::vector<float> back(kN);
    f.read_f32(f.get("w"), back);
    for (int64_t i = 0; i < kN; i += 997) ASSERT_EQ(back[i], kernels::round_bf16(old_values[i]));
  }
};

TEST(SafetensorsFaults, DiskFullMidWriteNamesPathAndBytes) {
  Fixture fx;
  const int64_t total = fx.posix.file_size(fx.path);
  FaultInjectingFileSystem fs(fx.posix);
  fs.fail(FsOp::kWrite, 4, ENOSPC);  // length, header, first chunk ok; the second chunk fails
  const std::string msg = checkpoint_error_of([&] { fx.write(fs, fx.new_values); });
  const int64_t header_end = total - 2 * kN;
  EXPECT_NE(
      msg.find("cannot write checkpoint file " + fx.path + ": write " + fx.path + ".tmp: No space left on device"),
      std::string::npos)
      << msg;
  EXPECT_NE(msg.find(fmt::format("{} of {} bytes written", header_end + 2 * 32768, total)), std::string::npos) << msg;
  EXPECT_NE(msg.find("free space on its file system: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("the previous file (if any) is intact"), std::string::npos) << msg;
  EXPECT_FALSE(fx.posix.exists(temp_path_for(fx.path)));
  fx.expect_old_file_intact();
}

TEST(SafetensorsFaults, IoErrorAtEveryStepKeepsThePreviousFile) {
  for (FsOp op : {FsOp::kOpenWrite, FsOp::kWrite, FsOp::kSync, FsOp::kClose, FsOp::kRename}) {
    Fixture fx;
    FaultInjectingFileSystem fs(fx.posix);
    fs.fail(op, 1, EIO);
    const std::string msg = checkpoint_error_of([&] { fx.write(fs, fx.new_values); });
    EXPECT_NE(msg.find("Input/output error"), std::string::npos) << fs_op_name(op) << ": " << msg;
    EXPECT_FALSE(fx.posix.exists(temp_path_for(fx.path))) << fs_op_name(op);
    fx.expect_old_file_intact();
  }
}

TEST(SafetensorsFaults, AFailedDirectoryFsyncDoesNotClaimTheOldFileIsIntact) {
  Fixture fx;
  FaultInjectingFileSystem fs(fx.posix);
  fs.fail(FsOp::kSyncDir, 1, EIO);
  const std::string msg = checkpoint_error_of([&] { fx.write(fs, fx.new_values); });
  EXPECT_NE(msg.find("sync_dir " + fx.tmp.path() + ": Input/output error"), std::string::npos) << msg;
  EXPECT_NE(msg.find(fx.path + " was replaced, but the rename may not survive a power loss"), std::string::npos) << msg;
  EXPECT_EQ(SafetensorsFile::open(fx.posix, fx.path).metadata().at("step"), "new");
}

TEST(SafetensorsFaults, KilledAfterAnyNumberOfBytesKeepsThePreviousFile) {
  Fixture fx;
  const int64_t total = fx.posix.file_size(fx.path);
  for (int64_t n : {int64_t{0}, int64_t{5}, int64_t{8}, int64_t{100}, total / 2, total - 1}) {
    FaultInjectingFileSystem fs(fx.posix);
    fs.crash_after_bytes(n);
    EXPECT_THROW(fx.write(fs, fx.new_values), SimulatedCrash) << n;
    EXPECT_EQ(fx.posix.file_size(temp_path_for(fx.path)), n);
    fx.expect_old_file_intact();
    // The torn temp file itself is refused cleanly by the reader.
    EXPECT_THROW(SafetensorsFile::open(fx.posix, temp_path_for(fx.path)), CheckpointError) << n;
  }
  fx.write(fx.posix, fx.new_values);  // the next save succeeds over the leftover temp
  EXPECT_FALSE(fx.posix.exists(temp_path_for(fx.path)));
}

TEST(SafetensorsFaults, ReadErrorsNameTheFile) {
  Fixture fx;
  FaultInjectingFileSystem fs(fx.posix);
  fs.fail(FsOp::kRead, 3, EIO);  // length and header read fine, the data read fails
  SafetensorsFile f = SafetensorsFile::open(fs, fx.path);
  std::vector<float> back(kN);
  const std::string msg = checkpoint_error_of([&] { f.read_f32(f.get("w"), back); });
  EXPECT_NE(msg.find("cannot read checkpoint file " + fx.path + ": read " + fx.path + ": Input/output error"),
            std::string::npos)
      << msg;
}

TEST(SafetensorsFaults, AFlippedDataByteIsCaughtByTheDigestNotTheHeader) {
  Fixture fx;
  const WrittenFile w = fx.write(fx.posix, fx.new_values);
  std::string bytes = testing::slurp(fx.path);
  bytes[bytes.size() - 1000] ^= 0x10;
  testing::put(fx.path, bytes);
  EXPECT_NO_THROW(SafetensorsFile::open(fx.posix, fx.path));  // the format cannot see it
  const std::string msg = checkpoint_error_of([&] { verify_file_digest(fx.posix, fx.path, w.digest); });
  EXPECT_NE(msg.find(fx.path + ": checksum mismatch: crc32 is "), std::string::npos) << msg;
}

}  // namespace
}  // namespace mtrain::checkpoint
