// Sharded checkpoints under faults: disk full on one rank's shard, a crash
// before the rename or before the tracker, and damaged checkpoints (flipped
// byte, truncated shard, missing file, garbage tracker, missing coverage).
#include <gtest/gtest.h>

#include <cerrno>
#include <map>
#include <optional>

#include "../common/fs_test_util.h"
#include "checkpoint/sharded_checkpoint.h"
#include "common/fault_file_system.h"
#include "fmt/format.h"
#include "sharded_test_util.h"

namespace mtrain::checkpoint {
namespace {

using namespace testing;  // NOLINT

struct Fixture {
  TempDir tmp;
  PosixFileSystem posix;
  std::string dir = tmp / "ckpt";
  std::string it100 = dir + "/iter_0000100";
  Fixture() {
    for (const std::string& e : save_on_4_ranks(posix, dir, 100)) EXPECT_EQ(e, "");
  }
  void expect_previous_intact() {
    EXPECT_FALSE(posix.exists(dir + "/iter_0000200.tmp"));
    EXPECT_FALSE(posix.exists(dir + "/iter_0000200"));
    expect_checkpoint(CheckpointReader::open(posix, dir), 100, {0, 3, 6}, {0, 4, 8});
  }
  std::string open_error() {
    return checkpoint_error_of([&] { CheckpointReader::open(posix, dir); });
  }
};

TEST(ShardedCheckpointFaults, DiskFullOnOneRankFailsEveryRank) {
  Fixture fx;
  FaultInjectingFileSystem fs(fx.posix);
  fs.fail(FsOp::kWrite, 2, ENOSPC, "rank_00002");
  const auto errors = save_on_4_ranks(fs, fx.dir, 200);
  for (size_t r = 0; r < errors.size(); ++r) {
    EXPECT_NE(errors[r].find("rank_00002.safetensors"), std::string::npos) << r << ": " << errors[r];
    EXPECT_NE(errors[r].find("No space left on device"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("bytes written"), std::string::npos) << errors[r];
  }
  fx.expect_previous_intact();
  // The next save goes through.
  for (const std::string& e : save_on_4_ranks(fx.posix, fx.dir, 200)) EXPECT_EQ(e, "");
  expect_checkpoint(CheckpointReader::open(fx.posix, fx.dir), 200, {0, 6}, {0, 8});
}

// Bytes a save of iteration 200 writes: shards, then the manifest, then the tracker.
struct SaveBytes {
  int64_t shards = 0, manifest = 0, tracker = 0;
};
SaveBytes measure_save() {
  TempDir t;
  PosixFileSystem fs;
  save_on_4_ranks(fs, t / "c", 200);
  SaveBytes b;
  for (int r = 0; r < 4; ++r) b.shards += fs.file_size(t / fmt::format("c/iter_0000200/rank_{:05d}.safetensors", r));
  b.manifest = fs.file_size(t / "c/iter_0000200/manifest.json");
  b.tracker = fs.file_size(t / "c/latest_checkpointed_iteration.txt");
  return b;
}

// `renamed`: the crash point lies after the rename of iter_0000200.tmp.
void crash_at(Fixture& fx, int64_t budget, bool renamed) {
  FaultInjectingFileSystem fs(fx.posix);
  fs.crash_after_bytes(budget);
  EXPECT_ANY_THROW(save_on_4_ranks(fs, fx.dir, 200));
  EXPECT_TRUE(fs.crashed());
  EXPECT_EQ(fx.posix.exists(fx.dir + "/iter_0000200"), renamed);
  EXPECT_EQ(fx.posix.exists(fx.dir + "/iter_0000200.tmp"), !renamed);
  expect_checkpoint(CheckpointReader::open(fx.posix, fx.dir), 100, {0, 3, 6}, {0, 4, 8});
  // A restarted run saves the same iteration again over the leftovers.
  for (const std::string& e : save_on_4_ranks(fx.posix, fx.dir, 200)) EXPECT_EQ(e, "");
  EXPECT_FALSE(fx.posix.exists(fx.dir + "/iter_0000200.tmp"));
  expect_checkpoint(CheckpointReader::open(fx.posix, fx.dir), 200, {0, 6}, {0, 2, 4, 6, 8});
}

TEST(ShardedCheckpointFaults, CrashMidShardsKeepsPrevious) {
  Fixture fx;
  crash_at(fx, measure_save().shards / 2, false);
}

TEST(ShardedCheckpointFaults, CrashBeforeRenameKeepsPrevious) {
  Fixture fx;
  const SaveBytes b = measure_save();
  crash_at(fx, b.shards + b.manifest - 1, false);
}

TEST(ShardedCheckpointFaults, CrashBeforeTrackerKeepsPrevious) {
  Fixture fx;
  const SaveBytes b = measure_save();
  crash_at(fx, b.shards + b.manifest + b.tracker - 1, true);
}

// Saving the iteration the tracker names again (a rerun into the same
// directory) swaps the new checkpoint in atomically; a crash at any
// file-system call of that save leaves a tracker that names a complete
// checkpoint, also when the replaced one is the only one.
void replace_latest_crashing_everywhere(bool with_older) {
  const auto prepare = [&](Fixture& fx) {
    if (!with_older) fx.posix.remove_all(fx.dir);
    for (const std::string& e : save_on_4_ranks(fx.posix, fx.dir, 200)) EXPECT_EQ(e, "");
  };
  std::vector<std::string> calls;
  {
    Fixture fx;
    prepare(fx);
    FaultInjectingFileSystem fs(fx.posix);
    for (const std::string& e : save_on_4_ranks(fs, fx.dir, 200)) EXPECT_EQ(e, "");
    calls = fs.log();
  }
  std::map<std::pair<std::string, std::string>, int64_t> seen;  // (op, file name) -> calls so far
  for (const std::string& call : calls) {
    const std::string op = call.substr(0, call.find(' '));
    std::string path = call.substr(op.size() + 1);
    path = path.substr(0, path.find(' '));
    const std::string name = path.substr(path.rfind('/') + 1);
    const int64_t nth = ++seen[{op, name}];
    std::optional<FsOp> which;
    for (FsOp o : {FsOp::kCreateDirs, FsOp::kOpenWrite, FsOp::kWrite, FsOp::kSync, FsOp::kClose, FsOp::kRename,
                   FsOp::kSyncDir, FsOp::kRemove})
      if (op == fs_op_name(o)) which = o;
    if (!which) continue;  // reads
    Fixture fx;
    prepare(fx);
    FaultInjectingFileSystem fs(fx.posix);
    fs.crash_at(*which, nth, name);
    try {
      save_on_4_ranks(fs, fx.dir, 200);
    } catch (const SimulatedCrash&) {
    }
    const CheckpointReader r = CheckpointReader::open(fx.posix, fx.dir);  // throws if the tracker dangles
    EXPECT_TRUE(r.iteration() == 200 || (with_older && r.iteration() == 100)) << call;
    for (const std::string& e : save_on_4_ranks(fx.posix, fx.dir, 200)) EXPECT_EQ(e, "") << call;
    EXPECT_EQ(CheckpointReader::open(fx.posix, fx.dir).iteration(), 200) << call;
  }
  EXPECT_GT(seen.size(), 10u);
}

TEST(ShardedCheckpointFaults, ReplacingTheLatestNeverLeavesTheTrackerDangling) {
  replace_latest_crashing_everywhere(true);
}

TEST(ShardedCheckpointFaults, ReplacingTheOnlyCheckpointNeverLosesIt) { replace_latest_crashing_everywhere(false); }

TEST(ShardedCheckpointFaults, FlippedByteNamesFileAndChecksums) {
  Fixture fx;
  const std::string f = fx.it100 + "/rank_00001.safetensors";
  std::string bytes = mtrain::testing::slurp(f);
  bytes[bytes.size() - 5] ^= 0x10;
  mtrain::testing::put(f, bytes);
  const std::string msg = fx.open_error();
  EXPECT_NE(msg.find(f + ": checksum mismatch: crc32 is "), std::string::npos) << msg;
}

TEST(ShardedCheckpointFaults, TruncatedShardNamesSizes) {
  Fixture fx;
  const std::string f = fx.it100 + "/rank_00002.safetensors";
  const std::string bytes = mtrain::testing::slurp(f);
  mtrain::testing::put(f, bytes.substr(0, bytes.size() - 10));
  const std::string msg = fx.open_error();
  EXPECT_NE(msg.find(fmt::format("{}: size {} bytes, the manifest says {}", f, bytes.size() - 10, bytes.size())),
            std::string::npos)
      << msg;
}

TEST(ShardedCheckpointFaults, MissingFilesAreNamed) {
  Fixture fx;
  fx.posix.remove_all(fx.it100 + "/rank_00000.safetensors");
  EXPECT_NE(fx.open_error().find("rank_00000.safetensors"), std::string::npos);
  fx.posix.remove_all(fx.it100 + "/manifest.json");
  EXPECT_NE(fx.open_error().find(fx.it100 + "/manifest.json"), std::string::npos);
}

TEST(ShardedCheckpointFaults, GarbageTrackerIsRefused) {
  Fixture fx;
  const std::string tracker = fx.dir + "/latest_checkpointed_iteration.txt";
  for (const char* garbage : {"", "abc", "100x", "-5", "1e3", "99999999999999999999"}) {
    mtrain::testing::put(tracker, garbage);
    const std::string msg = fx.open_error();
    EXPECT_NE(msg.find(tracker + ": expected an iteration number"), std::string::npos) << garbage << ": " << msg;
  }
  // The older checkpoint stays loadable on request.
  expect_checkpoint(CheckpointReader::open(fx.posix, fx.dir, 100), 100, {0, 6}, {0, 8});
  fx.posix.remove_all(tracker);
  EXPECT_NE(fx.open_error().find("cannot read the checkpoint tracker " + tracker), std::string::npos);
}

TEST(ShardedCheckpointFaults, DamagedManifestIsRefused) {
  Fixture fx;
  const std::string m = fx.it100 + "/manifest.json";
  const std::string good = mtrain::testing::slurp(m);
  for (const std::string& bad : {good.substr(0, good.size() / 2), std::string("[]"),
                                 std::string("{\"format\": \"mtrain-sharded-checkpoint\", \"version\": 9}")}) {
    mtrain::testing::put(m, bad);
    EXPECT_NE(fx.open_error().find(m + ": invalid checkpoint manifest"), std::string::npos);
  }
}

TEST(ShardedCheckpointFaults, MissingCoverageNamesTheTensor) {
  TempDir tmp;
  PosixFileSystem fs;
  const Globals g(5);
  parallel::SimWorld world(2);
  world.run([&](int rank) {
    auto comm = world.make_world_comm(rank);
    std::vector<std::vector<float>> store;
    std::vector<ShardedTensor> blocks = rank_blocks(g, rank, store);  // rows 0..2 only
    save_checkpoint(fs, *comm, tmp / "c", 5, blocks, "{}");
  });
  const CheckpointReader r = CheckpointReader::open(fs, tmp / "c");
  std::vector<float> out(kRows * kCols);
  r.read_block("decoder.w", {0, 0}, {3, 8}, out.data());
  const std::string msg = checkpoint_error_of([&] { r.read_block("decoder.w", {2, 0}, {2, 8}, out.data()); });
  EXPECT_NE(
      msg.find("tensor decoder.w: element 8 of the requested block (2, 8) at offsets [2, 0] is in no saved block"),
      std::string::npos)
      << msg;
}

}  // namespace
}  // namespace mtrain::checkpoint
