// A checkpoint never loses data (reliability.md F1-F3), through the real
// binary and the save-fault seam (MTRAIN_FAULT=save_*, lib/train/fault_injection.h):
//   killed mid-save (a shard half written on rank 1 of 2, just before the
//   rename of iter_N.tmp, just before the tracker is replaced): the previous
//   checkpoint stays the latest, and the restarted run (--load, same
//   directory) continues exactly: its losses for 11..20 equal bit for bit the
//   ones the killed run logged before its save of iteration 20;
//   disk full on rank 1 of 2: --on_save_error stop ends every rank with exit 5
//   naming the file and the bytes it needed, continue warns once and goes on;
//   a save that hangs on rank 1 of 2 ends the job (exit 5) after
//   --save_timeout_minutes, naming the save;
//   a damaged checkpoint (flipped byte, truncated, deleted or garbage file) is
//   refused before training with exit 5, naming the file and what is wrong,
//   and --ckpt_step loads the older good one;
//   the directories and files get --checkpoint_dir_mode / --checkpoint_file_mode.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <csignal>
#include <functional>
#include <regex>
#include <string>
#include <vector>

#include "checkpoint/sharded_checkpoint.h"
#include "common/file_system.h"
#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

constexpr int kCheckpointExit = 5;
constexpr double kBound = 60;  // seconds a stalled save may take to end the job (timeout 6 s + teardown)
const std::string kTracker = "latest_checkpointed_iteration.txt";

std::vector<std::string> resume(const fs::path& dir, const std::string& extra = "") {
  return concat(checkpoint_job(dir, extra), {"--load", dir.string()});
}

// `ranks` processes (NPROC_PER_NODE through mpirun when > 1); `fault` is the
// MTRAIN_FAULT value for rank `fault_rank` (none when empty).
RunOptions launch(int ranks, const std::string& fault = "", int fault_rank = 0) {
  RunOptions o = launch_ranks(ranks, 180);  // a hang that escapes the save timeout fails here, not in ctest
  if (!fault.empty())
    o.env.insert(o.env.end(), {{"MTRAIN_FAULT_RANK", std::to_string(fault_rank)}, {"MTRAIN_FAULT", fault}});
  o.unset_env.insert(o.unset_env.end(), {"MTRAIN_FAULT", "MTRAIN_FAULT_RANK"});
  return o;
}

std::string tracker_of(const fs::path& dir) { return read_text(dir / kTracker); }

// Opening verifies the manifest and every file's size and crc32.
void expect_loadable(const fs::path& dir, int64_t iteration) {
  PosixFileSystem pfs;
  try {
    const auto r = checkpoint::CheckpointReader::open(pfs, dir.string());
    EXPECT_EQ(r.iteration(), iteration);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "checkpoint in " << dir << " does not load: " << e.what();
  }
}

// The last ten rows of `got` (from `got_from`: iterations 11..20) equal
// `want`'s from `want_from` bit for bit: iteration, loss and grad norm.
void expect_same_steps(const std::vector<nlohmann::json>& want, size_t want_from,
                       const std::vector<nlohmann::json>& got, size_t got_from) {
  ASSERT_GE(want.size(), want_from + 10);
  ASSERT_EQ(got.size(), got_from + 10);
  for (size_t i = 0; i < 10; ++i) {
    const nlohmann::json &a = want[want_from + i], &b = got[got_from + i];
    ASSERT_EQ(b.at("iteration").get<std::string>(), std::to_string(11 + i) + "/20");
    ASSERT_EQ(a.at("iteration").get<std::string>(), b.at("iteration").get<std::string>());
    EXPECT_EQ(a.at("loss").get<double>(), b.at("loss").get<double>()) << "iteration " << 11 + i;
    EXPECT_EQ(a.at("grad_norm").get<double>(), b.at("grad_norm").get<double>()) << "iteration " << 11 + i;
  }
}

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

// --- killed during the save of iteration 20 ---------------------------------

struct KillCase {
  std::string point;  // save_kill@20:<point>
  int ranks;
  int fault_rank;
};

std::ostream& operator<<(std::ostream& os, const KillCase& k) { return os << k.point << "_on_" << k.ranks; }

class KilledSave : public MtrainTest, public ::testing::WithParamInterface<KillCase> {};

TEST_P(KilledSave, PreviousCheckpointStaysLatestAndTheRestartContinuesExactly) {
  const KillCase& k = GetParam();
  const fs::path dir = tmp_ / "run";
  const RunResult killed = run(checkpoint_job(dir), "killed", launch(k.ranks, "save_kill@20:" + k.point, k.fault_rank));
  ASSERT_FALSE(killed.timed_out) << killed.describe();
  EXPECT_NE(killed.exit_code, 0) << killed.describe();
  EXPECT_TRUE(contains(killed.err, "injected fault (MTRAIN_FAULT=save_kill@20:" + k.point + "): rank " +
                                       std::to_string(k.fault_rank) +
                                       " is killed (SIGKILL) in the save of iteration 20"))
      << killed.err;
  if (k.ranks == 1) {
    EXPECT_EQ(killed.signal, SIGKILL) << killed.describe();
  } else {
    EXPECT_EQ(killed.exit_code, 128 + SIGKILL) << killed.describe();
    EXPECT_TRUE(contains(killed.err, "mpirun noticed that process rank " + std::to_string(k.fault_rank) + " with PID"))
        << killed.err;
    EXPECT_TRUE(contains(killed.err, "exited on signal 9 (Killed)")) << killed.err;
  }
  EXPECT_TRUE(contains(killed.out, "successfully saved checkpoint from iteration      10")) << killed.out;
  EXPECT_FALSE(contains(killed.out, "successfully saved checkpoint from iteration      20")) << killed.out;

  // What the kill left: iteration 10 is still the latest checkpoint.
  EXPECT_EQ(tracker_of(dir), "10");
  const fs::path tmp20 = dir / "iter_0000020.tmp", iter20 = dir / "iter_0000020";
  if (k.point == "shard") {
    EXPECT_FALSE(fs::exists(iter20));
    const fs::path part = tmp20 / ("rank_0000" + std::to_string(k.fault_rank) + ".safetensors.tmp");
    ASSERT_TRUE(fs::exists(part)) << "the killed rank's shard was being written";
    EXPECT_EQ(fs::file_size(part), 64u * 1024) << "kSaveKillShardBytes reached the disk before the kill";
    EXPECT_FALSE(fs::exists(tmp20 / "manifest.json"));
  } else if (k.point == "rename") {
    EXPECT_FALSE(fs::exists(iter20));
    EXPECT_TRUE(fs::exists(tmp20 / "manifest.json")) << "complete, but never renamed into place";
  } else {
    EXPECT_FALSE(fs::exists(tmp20));
    EXPECT_TRUE(fs::exists(iter20 / "manifest.json")) << "renamed into place, but the tracker never named it";
    EXPECT_EQ(read_text(dir / (kTracker + ".tmp")), "20") << "the new tracker was written but not renamed";
  }

  // The restart, the way users restart: the same directory for --load and --output_dir.
  const RunResult resumed = run(resume(dir), "resumed", launch(k.ranks));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.describe();
  EXPECT_TRUE(contains(resumed.out, "successfully loaded checkpoint from " + dir.string())) << resumed.out;
  EXPECT_TRUE(contains(resumed.out, "at iteration 10")) << resumed.out;
  // logging.jsonl is appended to: the killed run's 1..20 (logged before its
  // save of 20), then the restart's 11..20.
  const auto rows = train_rows(dir);
  ASSERT_EQ(rows.size(), 30u);
  EXPECT_EQ(rows[19].at("iteration").get<std::string>(), "20/20");
  expect_same_steps(rows, 10, rows, 20);
  EXPECT_EQ(tracker_of(dir), "20");
  EXPECT_FALSE(fs::exists(tmp20)) << "the restart's save replaced the leftover";
  EXPECT_FALSE(fs::exists(dir / (kTracker + ".tmp")));
  expect_loadable(dir, 20);
}

INSTANTIATE_TEST_SUITE_P(Points, KilledSave,
                         ::testing::Values(KillCase{"shard", 2, 1}, KillCase{"rename", 1, 0},
                                           KillCase{"tracker", 1, 0}),
                         [](const auto& info) { return info.param.point; });

// --- disk full and stalled saves on rank 1 of 2 --------------------------------

using SaveErrors = MtrainTest;

TEST_F(SaveErrors, DiskFullStopsEveryRankAndKeepsThePreviousCheckpoint) {
  const fs::path dir = tmp_ / "run";
  const RunResult r =
      run(checkpoint_job(dir, "--save_interval 5 --on_save_error stop"), "enospc", launch(2, "save_enospc@10", 1));
  ASSERT_FALSE(r.timed_out) << r.describe();
  EXPECT_EQ(r.exit_code, kCheckpointExit) << r.describe();
  // Each rank ends with the agreed error: rank 1 its own, rank 0 naming rank 1.
  const std::string file = (dir / "iter_0000010.tmp" / "rank_00001.safetensors").string();
  const std::string own = "mtrain: error: (rank 1, node 0) cannot write checkpoint file " + file + ": ";
  const size_t at = r.err.find(own);
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::string line = r.err.substr(at, r.err.find('\n', at) - at);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(line, m, std::regex(R"(No space left on device.*; 0 of (\d+) bytes written)"))) << line;
  EXPECT_EQ(std::stoll(m[1]), static_cast<long long>(fs::file_size(dir / "iter_0000005" / "rank_00001.safetensors")))
      << "the bytes needed: the size of the same shard saved at iteration 5";
  EXPECT_TRUE(contains(r.err, "mtrain: error: (rank 0, node 0) rank 1: cannot write checkpoint file " + file)) << r.err;
  EXPECT_EQ(training_lines(r.out).size(), 10u) << "stopped after iteration 10:\n" << r.out;

  EXPECT_FALSE(fs::exists(dir / "iter_0000010.tmp")) << "the temporary directory is removed";
  EXPECT_FALSE(fs::exists(dir / "iter_0000010"));
  EXPECT_EQ(tracker_of(dir), "5");
  expect_loadable(dir, 5);
}

TEST_F(SaveErrors, DiskFullWithContinueWarnsOnceAndSavesLater) {
  const fs::path dir = tmp_ / "run";
  const RunResult r = run(checkpoint_job(dir, "--on_save_error continue"), "enospc", launch(2, "save_enospc@10", 1));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::string warning = "mtrain: warning: the checkpoint of iteration 10 was not saved: ";
  const size_t at = r.err.find(warning);
  ASSERT_NE(at, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(warning, at + 1), std::string::npos) << "printed once:\n" << r.err;
  EXPECT_TRUE(contains(r.err, "No space left on device")) << r.err;
  EXPECT_EQ(train_rows(dir).size(), 20u);
  EXPECT_FALSE(fs::exists(dir / "iter_0000010"));
  EXPECT_FALSE(fs::exists(dir / "iter_0000010.tmp"));
  EXPECT_EQ(tracker_of(dir), "20");
  expect_loadable(dir, 20);
}

TEST_F(SaveErrors, AHungSaveEndsTheJobAfterTheSaveTimeout) {
  const fs::path dir = tmp_ / "run";
  const RunResult r =
      run(checkpoint_job(dir, "--save_interval 5 --save_timeout_minutes 0.1"), "hang", launch(2, "save_hang@10", 1));
  ASSERT_FALSE(r.timed_out) << r.describe();
  EXPECT_LT(r.seconds, kBound) << r.describe();
  EXPECT_EQ(r.exit_code, kCheckpointExit) << r.describe();
  EXPECT_TRUE(contains(r.err, "injected fault (MTRAIN_FAULT=save_hang@10): rank 1 hangs in the checkpoint save"))
      << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(mtrain: error: rank [01]: no progress for \d+\.\d s during )"
                                                  R"(checkpoint save of iteration 10)")))
      << r.err;
  EXPECT_TRUE(contains(r.err, "saving to " + dir.string() + " stalled")) << r.err;
  EXPECT_EQ(training_lines(r.out).size(), 10u) << r.out;
  EXPECT_FALSE(fs::exists(dir / "iter_0000010")) << "the stalled save is not visible as a checkpoint";
  EXPECT_EQ(tracker_of(dir), "5");
  expect_loadable(dir, 5);
}

// One process has no rank watchdog: the save still has its time limit.
TEST_F(SaveErrors, AHungSaveEndsASingleProcessRunToo) {
  const fs::path dir = tmp_ / "run";
  const RunResult r =
      run(checkpoint_job(dir, "--save_interval 5 --save_timeout_minutes 0.1"), "hang", launch(1, "save_hang@10", 0));
  ASSERT_FALSE(r.timed_out) << r.describe();
  EXPECT_EQ(r.exit_code, kCheckpointExit) << r.describe();
  EXPECT_TRUE(contains(r.err, "during checkpoint save of iteration 10") || contains(r.err, "rank 0: no progress for"))
      << r.err;
  EXPECT_EQ(tracker_of(dir), "5");
  expect_loadable(dir, 5);
}

// --- damaged checkpoints -------------------------------------------------------

class Damaged : public MtrainTest {
 protected:
  // The straight run: 20 iterations, checkpoints at 10 and 20.
  void SetUp() override {
    MtrainTest::SetUp();
    straight_ = tmp_ / "straight";
    const RunResult r = run(checkpoint_job(straight_), "straight", launch(1));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    ASSERT_EQ(tracker_of(straight_), "20");
  }
  // A copy of the straight run's checkpoints, damaged by `damage`.
  fs::path damaged_copy(const std::string& name, const std::function<void(const fs::path&)>& damage) {
    const fs::path dir = tmp_ / name;
    fs::copy(straight_, dir, fs::copy_options::recursive);
    damage(dir);
    return dir;
  }
  // A run loading `dir` (saving elsewhere) is refused with exit 5 before training.
  RunResult refused(const fs::path& dir, const std::string& tag) {
    const RunResult r = run(concat(checkpoint_job(tmp_ / (tag + "_out")), {"--load", dir.string()}), tag, launch(1));
    EXPECT_EQ(r.exit_code, kCheckpointExit) << r.describe();
    EXPECT_TRUE(training_lines(r.out).empty()) << "refused before training:\n" << r.out;
    return r;
  }
  fs::path straight_;
};

const std::string kRankFile = "iter_0000020/rank_00000.safetensors";

void flip_byte(const fs::path& file) {
  std::string bytes = read_text(file);
  bytes[bytes.size() / 2] ^= 0x01;
  write_text(file, bytes);
}

TEST_F(Damaged, AFlippedByteIsRefusedWithBothChecksums) {
  const fs::path dir = damaged_copy("flipped", [](const fs::path& d) { flip_byte(d / kRankFile); });
  const RunResult r = refused(dir, "flipped");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.err, m,
      std::regex(R"(rank_00000\.safetensors: checksum mismatch: crc32 is ([0-9a-f]{8}), the manifest says )"
                 R"(([0-9a-f]{8}))")))
      << r.err;
  EXPECT_TRUE(contains(r.err, (dir / kRankFile).string() + ": checksum mismatch")) << r.err;
  const auto manifest = nlohmann::json::parse(read_text(dir / "iter_0000020" / "manifest.json"));
  EXPECT_EQ(m[2].str(), manifest.at("files").at(0).at("crc32").get<std::string>());
  EXPECT_NE(m[1].str(), m[2].str());
}

TEST_F(Damaged, ATruncatedRankFileIsRefusedWithBothSizes) {
  const uintmax_t full = fs::file_size(straight_ / kRankFile);
  const fs::path dir = damaged_copy("truncated", [&](const fs::path& d) { fs::resize_file(d / kRankFile, full / 2); });
  const RunResult r = refused(dir, "truncated");
  EXPECT_TRUE(contains(r.err, (dir / kRankFile).string() + ": size " + std::to_string(full / 2) +
                                  " bytes, the manifest says " + std::to_string(full) + " (truncated?)"))
      << r.err;
}

TEST_F(Damaged, AMissingRankFileIsRefusedNamingIt) {
  const fs::path dir = damaged_copy("deleted", [](const fs::path& d) { fs::remove(d / kRankFile); });
  const RunResult r = refused(dir, "deleted");
  EXPECT_TRUE(contains(r.err, "checkpoint file missing or unreadable: stat " + (dir / kRankFile).string() +
                                  ": No such file or directory"))
      << r.err;
}

TEST_F(Damaged, AGarbageTrackerIsRefused) {
  const fs::path dir = damaged_copy("tracker", [](const fs::path& d) { write_text(d / kTracker, "abc"); });
  const RunResult r = refused(dir, "tracker");
  EXPECT_TRUE(contains(r.err, (dir / kTracker).string() + ": expected an iteration number, found \"abc\"")) << r.err;
}

TEST_F(Damaged, AManifestThatIsNotJsonIsRefused) {
  const fs::path manifest = fs::path("iter_0000020") / "manifest.json";
  const fs::path dir = damaged_copy("manifest", [&](const fs::path& d) { write_text(d / manifest, "{\"format\": "); });
  const RunResult r = refused(dir, "manifest");
  EXPECT_TRUE(contains(r.err, (dir / manifest).string() + ": invalid checkpoint manifest: not JSON")) << r.err;
}

// The hint of every refusal above: load the older checkpoint explicitly. The
// run trains 11..20 exactly as the straight run did and, saving into the same
// directory, replaces the damaged iteration 20 with a good one.
TEST_F(Damaged, CkptStepLoadsTheOlderGoodCheckpoint) {
  const fs::path dir = damaged_copy("older", [](const fs::path& d) { flip_byte(d / kRankFile); });
  fs::remove(dir / "logging.jsonl");
  const RunResult r =
      run(concat(checkpoint_job(dir), {"--load", dir.string(), "--ckpt_step", "10"}), "older", launch(1));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "successfully loaded checkpoint from " + dir.string())) << r.out;
  EXPECT_TRUE(contains(r.out, "at iteration 10")) << r.out;
  expect_same_steps(train_rows(straight_), 10, train_rows(dir), 0);
  expect_loadable(dir, 20);
}

// The state record is checked before anything is applied: a negative
// optimizer step (which would otherwise surface later as a NaN) is refused.
TEST_F(Damaged, AnImpossibleStateValueIsRefused) {
  const fs::path manifest = fs::path("iter_0000020") / "manifest.json";
  const fs::path dir = damaged_copy("state", [&](const fs::path& d) {
    auto m = nlohmann::json::parse(read_text(d / manifest));
    m["state"]["optimizer"]["step"] = -1;
    write_text(d / manifest, m.dump());
  });
  const RunResult r = refused(dir, "state");
  EXPECT_TRUE(contains(r.err, "\"step\" of the checkpoint state is not a non-negative integer")) << r.err;
}

// --- permissions -----------------------------------------------------------------

using Permissions = MtrainTest;

TEST_F(Permissions, DefaultAndRequestedModes) {
  struct Case {
    std::string flags;
    mode_t dir_mode, file_mode;
  };
  for (const Case& c :
       {Case{"", 0750, 0640}, Case{"--checkpoint_dir_mode 0700 --checkpoint_file_mode 0600", 0700, 0600}}) {
    SCOPED_TRACE(c.flags.empty() ? "defaults" : c.flags);
    const fs::path dir = tmp_ / (c.flags.empty() ? "defaults" : "private");
    const RunResult r =
        run(checkpoint_job(dir, "--train_iters 2 --save_interval 2 " + c.flags), dir.filename().string(), launch(1));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    const fs::path iter = dir / "iter_0000002";
    EXPECT_EQ(mode_of(iter), c.dir_mode) << std::oct << mode_of(iter);
    for (const fs::path& f : {iter / "rank_00000.safetensors", iter / "manifest.json", dir / kTracker})
      EXPECT_EQ(mode_of(f), c.file_mode) << f << ": " << std::oct << mode_of(f);
  }
}

}  // namespace
}  // namespace mtrain::functional
