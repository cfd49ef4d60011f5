// FAULT INJECTION -- a test seam, not a feature (like leveldb's
// fault_injection_test Env). Two environment variables, read once by
// run_training and by nothing else, make one rank misbehave so the tests can
// prove that a stuck or crashed rank ends the whole job and that a failed or
// killed checkpoint save never loses data (docs/LAUNCH.md "Fault injection"):
//   MTRAIN_FAULT=hang@<iteration>  the rank sleeps forever at the start of the iteration
//   MTRAIN_FAULT=exit@<iteration>  the rank ends at once with exit code 1, like a crash
//   MTRAIN_FAULT=save_kill@<iteration>:<point>
//                                  the rank is SIGKILLed during the save of that
//                                  iteration: `shard` once kSaveKillShardBytes of
//                                  its shard reached the disk, `rename` just
//                                  before iter_N.tmp is renamed into place,
//                                  `tracker` just before the tracker is replaced
//                                  (the last two happen on rank 0 only)
//   MTRAIN_FAULT=save_enospc@<iteration>  the rank's first write of that save fails with ENOSPC
//   MTRAIN_FAULT=save_hang@<iteration>    the rank blocks forever in that save
//   MTRAIN_FAULT_RANK=<r>          the rank that does it (default 0)
// The save faults live in SaveFaultFileSystem, the file system the run
// checkpoints through (checkpoint_file_system); FaultInjectionHook arms it at
// the start of the iteration, whose save runs after its step.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/fault_file_system.h"
#include "common/file_system.h"
#include "observe/hooks.h"

namespace mtrain::train {

// Bytes of a rank's shard that reach the disk before save_kill@N:shard kills
// it: the safetensors header and the start of the first tensor.
inline constexpr int64_t kSaveKillShardBytes = 64 * 1024;

struct InjectedFault {
  enum class Kind { kHang, kExit, kSaveKill, kSaveEnospc, kSaveHang };
  enum class SavePoint { kShard, kRename, kTracker };  // save_kill only
  Kind kind = Kind::kHang;
  SavePoint point = SavePoint::kShard;
  int rank = 0;
  int64_t iteration = 1;
  std::string spec;  // the MTRAIN_FAULT value, for the message

  bool in_save() const { return kind == Kind::kSaveKill || kind == Kind::kSaveEnospc || kind == Kind::kSaveHang; }
};

// Parses the two variables' values (null = unset). No fault when `fault` is
// null or empty; a malformed value is a UsageError naming the variable.
std::optional<InjectedFault> parse_injected_fault(const char* fault_rank, const char* fault);

// The file system a save fault acts through: the real one, with the fault's
// rules applied to the calls made while armed (during one save).
class SaveFaultFileSystem final : public FileSystem {
 public:
  explicit SaveFaultFileSystem(InjectedFault fault);
  // Called on the fault's rank at the start of each iteration: armed for the
  // fault's iteration (announced on stderr), disarmed for any other.
  void arm_for(int64_t iteration);

  void create_dirs(const std::string& path, mode_t mode = kDefaultDirMode) override;
  std::unique_ptr<WritableFile> open_for_write(const std::string& path, mode_t mode = kDefaultFileMode) override;
  std::unique_ptr<ReadableFile> open_for_read(const std::string& path) override;
  void rename(const std::string& from, const std::string& to) override;
  void exchange(const std::string& a, const std::string& b) override;
  void sync_dir(const std::string& path) override;
  void remove_all(const std::string& path) override;
  bool exists(const std::string& path) override;
  int64_t file_size(const std::string& path) override;
  std::vector<DirEntry> list_dir(const std::string& path) override;
  int64_t free_bytes(const std::string& path) override;

 private:
  // The file system for the next call: the injecting one while armed (after
  // blocking forever for save_hang), the real one otherwise.
  FileSystem& target();

  InjectedFault fault_;
  PosixFileSystem real_;
  FaultInjectingFileSystem injecting_{real_};
  std::atomic<bool> armed_{false};
};

// The file system a run loads and saves checkpoints through: the real one, or
// a SaveFaultFileSystem when `fault` is a save fault.
std::unique_ptr<FileSystem> checkpoint_file_system(const std::optional<InjectedFault>& fault);

// Carries out `fault` in on_step_begin of its iteration on its rank: hangs or
// exits, or arms `fs` for a save fault (when `fs` is a SaveFaultFileSystem).
class FaultInjectionHook : public observe::TrainHook {
 public:
  FaultInjectionHook(InjectedFault fault, int rank, FileSystem& fs);
  void on_step_begin(int64_t iteration) override;

 private:
  InjectedFault fault_;
  int rank_;
  SaveFaultFileSystem* save_fs_;  // null: not a save fault
};

}  // namespace mtrain::train
