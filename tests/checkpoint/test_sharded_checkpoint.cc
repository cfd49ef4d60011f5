// Sharded checkpoints: a 2x2-split save on 4 simulated ranks reads back bit
// for bit under other splittings; on-disk layout, tracker, manifest,
// permissions; retention; stale temporary directories.
#include <gtest/gtest.h>

#include <filesystem>

#include "../common/fs_test_util.h"
#include "checkpoint/sharded_checkpoint.h"
#include "common/atomic_file.h"
#include "nlohmann/json.hpp"
#include "sharded_test_util.h"

namespace mtrain::checkpoint {
namespace {

using namespace testing;  // NOLINT
using mtrain::testing::mode_of;

TEST(ShardedCheckpoint, SaveOn2x2ReadsBackUnderAnySplit) {
  TempDir tmp;
  PosixFileSystem fs;
  const std::string dir = tmp / "ckpt";
  const auto errors = save_on_4_ranks(fs, dir, 100);
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  const CheckpointReader r = CheckpointReader::open(fs, dir);
  EXPECT_EQ(r.global_shape("decoder.w"), (Shape{kRows, kCols}));
  EXPECT_TRUE(r.has("decoder.norm"));
  EXPECT_FALSE(r.has("decoder.bias"));
  EXPECT_EQ(r.blocks("decoder.norm").size(), 1u);  // one writer
  EXPECT_EQ(r.blocks("decoder.w").size(), 4u);
  EXPECT_EQ(nlohmann::json::parse(r.state_json())["iteration"], 100);
  expect_checkpoint(r, 100, {0, 3, 6}, {0, 4, 8});        // the saving split
  expect_checkpoint(r, 100, {0, 6}, {0, 8});              // one block
  expect_checkpoint(r, 100, {0, 6}, {0, 2, 4, 6, 8});     // 4 column blocks
  expect_checkpoint(r, 100, {0, 1, 4, 6}, {0, 8});        // 3 uneven row blocks
  expect_checkpoint(r, 100, {0, 2, 5, 6}, {0, 3, 5, 8});  // crossing every saved boundary
}

TEST(ShardedCheckpoint, LayoutTrackerManifestAndPermissions) {
  TempDir tmp;
  PosixFileSystem fs;
  const std::string dir = tmp / "ckpt";
  save_on_4_ranks(fs, dir, 100);
  const std::string it = dir + "/iter_0000100";
  EXPECT_EQ(read_small_text_file(fs, dir + "/latest_checkpointed_iteration.txt"), "100");
  EXPECT_FALSE(fs.exists(it + ".tmp"));
  EXPECT_EQ(mode_of(dir), 0750u);
  EXPECT_EQ(mode_of(it), 0750u);
  for (const char* f : {"rank_00000.safetensors", "rank_00003.safetensors", "manifest.json"}) {
    EXPECT_EQ(mode_of(it + "/" + f), 0640u) << f;
  }
  EXPECT_EQ(mode_of(dir + "/latest_checkpointed_iteration.txt"), 0640u);
  // Each shard is a plain safetensors file recording the global shape and offsets.
  const SafetensorsFile f = SafetensorsFile::open(fs, it + "/rank_00003.safetensors");
  const auto meta = nlohmann::json::parse(f.metadata().at("decoder.w"));
  EXPECT_EQ(meta["global_shape"], nlohmann::json::parse("[6, 8]"));
  EXPECT_EQ(meta["offsets"], nlohmann::json::parse("[3, 4]"));
  EXPECT_EQ(f.find("decoder.norm"), nullptr);  // rank 0 writes the norm
  const auto m = nlohmann::json::parse(fs.read_file(it + "/manifest.json", 1 << 20));
  EXPECT_EQ(m["version"], kShardedFormatVersion);
  EXPECT_EQ(m["iteration"], 100);
  ASSERT_EQ(m["files"].size(), 4u);
  const FileDigest d = digest_file(fs, it + "/rank_00003.safetensors");
  EXPECT_EQ(m["files"][3]["size"], d.size);
  EXPECT_EQ(m["files"][3]["crc32"], crc32_hex(d.crc32));
}

TEST(ShardedCheckpoint, ConfigurablePermissions) {
  TempDir tmp;
  PosixFileSystem fs;
  const std::string dir = tmp / "ckpt";
  SaveOptions opts;
  opts.dir_mode = 0700;
  opts.file_mode = 0600;
  save_on_4_ranks(fs, dir, 1, opts);
  EXPECT_EQ(mode_of(dir + "/iter_0000001"), 0700u);
  EXPECT_EQ(mode_of(dir + "/iter_0000001/manifest.json"), 0600u);
  opts.file_mode = 0666;  // world-writable: refused on every rank
  for (const std::string& e : save_on_4_ranks(fs, dir, 2, opts)) EXPECT_NE(e, "");
  EXPECT_FALSE(fs.exists(dir + "/iter_0000002"));
}

TEST(ShardedCheckpoint, RetentionKeepsLastNAndNeverTheNewOne) {
  TempDir tmp;
  PosixFileSystem fs;
  const std::string dir = tmp / "ckpt";
  SaveOptions opts;
  opts.keep_last = 2;
  for (int64_t it : {10, 20, 30, 40}) save_on_4_ranks(fs, dir, it, opts);
  EXPECT_FALSE(fs.exists(dir + "/iter_0000010"));
  EXPECT_FALSE(fs.exists(dir + "/iter_0000020"));
  EXPECT_TRUE(fs.exists(dir + "/iter_0000030"));
  expect_checkpoint(CheckpointReader::open(fs, dir), 40, {0, 6}, {0, 8});
  expect_checkpoint(CheckpointReader::open(fs, dir, 30), 30, {0, 6}, {0, 8});
  opts.keep_last = 1;  // only the one just committed
  save_on_4_ranks(fs, dir, 50, opts);
  EXPECT_FALSE(fs.exists(dir + "/iter_0000030"));
  EXPECT_FALSE(fs.exists(dir + "/iter_0000040"));
  expect_checkpoint(CheckpointReader::open(fs, dir), 50, {0, 3, 6}, {0, 8});
}

TEST(ShardedCheckpoint, StaleTempDirAndAnEarlierSaveOfTheIterationAreReplaced) {
  TempDir tmp;
  PosixFileSystem fs;
  const std::string dir = tmp / "ckpt";
  fs.create_dirs(dir + "/iter_0000100.tmp");
  mtrain::testing::put(dir + "/iter_0000100.tmp/rank_00009.safetensors", "junk");
  save_on_4_ranks(fs, dir, 100);
  EXPECT_FALSE(fs.exists(dir + "/iter_0000100/rank_00009.safetensors"));
  expect_checkpoint(CheckpointReader::open(fs, dir), 100, {0, 6}, {0, 8});
  // Saving iteration 100 again (a rerun into the same directory) replaces it.
  for (const std::string& e : save_on_4_ranks(fs, dir, 100)) EXPECT_EQ(e, "");
  expect_checkpoint(CheckpointReader::open(fs, dir), 100, {0, 6}, {0, 8});
}

TEST(ShardedCheckpoint, ReadBlockErrorsNameTheTensor) {
  TempDir tmp;
  PosixFileSystem fs;
  const std::string dir = tmp / "ckpt";
  save_on_4_ranks(fs, dir, 7);
  const CheckpointReader r = CheckpointReader::open(fs, dir);
  std::vector<float> out(64);
  EXPECT_NE(checkpoint_error_of([&] {
              r.read_block("decoder.w", {4, 0}, {3, 8}, out.data());
            }).find("tensor decoder.w: requested block (3, 8) at offsets [4, 0] is outside"),
            std::string::npos);
  EXPECT_NE(checkpoint_error_of([&] { r.read_block("nope", {0}, {1}, out.data()); }).find("no tensor nope"),
            std::string::npos);
}

}  // namespace
}  // namespace mtrain::checkpoint
