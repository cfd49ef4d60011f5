// FAULT INJECTION -- a test seam, not a feature (leveldb's fault_injection_test
// Env). FaultInjectingFileSystem wraps a real FileSystem and makes it fail the
// way disks and processes fail during a save:
//   fail(op, nth, errno)        the nth call of `op` (optionally only on paths
//                               containing a substring) fails with errno,
//                               e.g. the 3rd write with ENOSPC, an fsync with EIO;
//   crash_at(op, nth, name, how) the nth call of `op` on a path whose last
//                               component is `name` (the rename of
//                               "iter_0000020.tmp") "dies" before it runs;
//   crash_after_bytes(n, how)   the writer "dies" once n more bytes reached
//                               files: the crossing write persists only its
//                               prefix, then every call throws SimulatedCrash
//                               (kThrow) or the process gets SIGKILL (kKill);
//   drop_unsynced_data()        power loss: every file written through this
//                               object loses what was appended after its last
//                               successful fsync (renames are kept: directory
//                               entries are not modelled; the files are
//                               rewritten with the default mode).
// log() records every call in order ("sync_dir <path>", ...) so a test can
// check that a protocol fsyncs before it renames. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/file_system.h"

namespace mtrain {

enum class FsOp { kCreateDirs, kOpenWrite, kWrite, kSync, kClose, kRename, kSyncDir, kRemove, kOpenRead, kRead };
const char* fs_op_name(FsOp op);

// Thrown by every call after a simulated crash. Deliberately not an IoError:
// code under test must not mistake a dead process for a handled I/O error.
class SimulatedCrash : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class FaultInjectingFileSystem final : public FileSystem {
 public:
  enum class CrashAction { kThrow, kKill };

  explicit FaultInjectingFileSystem(FileSystem& base) : base_(base) {}

  void fail(FsOp op, int64_t nth, int err, std::string path_contains = "");
  void crash_after_bytes(int64_t bytes, CrashAction action = CrashAction::kThrow);
  void crash_at(FsOp op, int64_t nth, std::string name, CrashAction action = CrashAction::kThrow);
  void drop_unsynced_data();

  std::vector<std::string> log() const;
  bool crashed() const;
  int64_t bytes_written() const;  // bytes that reached files through this object
  int64_t calls(FsOp op) const;

  void create_dirs(const std::string& path, mode_t mode = kDefaultDirMode) override;
  std::unique_ptr<WritableFile> open_for_write(const std::string& path, mode_t mode = kDefaultFileMode) override;
  std::unique_ptr<ReadableFile> open_for_read(const std::string& path) override;
  void rename(const std::string& from, const std::string& to) override;
  void exchange(const std::string& a, const std::string& b) override;  // counted and ruled as kRename
  void sync_dir(const std::string& path) override;
  void remove_all(const std::string& path) override;
  bool exists(const std::string& path) override;
  int64_t file_size(const std::string& path) override;
  std::vector<DirEntry> list_dir(const std::string& path) override;
  int64_t free_bytes(const std::string& path) override;

 private:
  friend class FaultWritableFile;
  friend class FaultReadableFile;
  struct Rule {
    FsOp op;
    int64_t nth;
    int err;
    std::string path_contains;
    int64_t seen = 0;
  };
  struct CrashRule {
    FsOp op;
    int64_t nth;
    std::string name;  // the path's last component
    CrashAction action;
    int64_t seen = 0;
  };

  // Counts the call, logs it, throws SimulatedCrash after a crash, crashes
  // when a crash rule says so and throws IoError when a rule says so.
  // Caller holds mu_.
  void before(FsOp op, const std::string& path, const std::string& what);
  // How many of `n` bytes may still be written before the crash point.
  int64_t allowed_bytes(int64_t n) const;
  [[noreturn]] void die(const std::string& path, CrashAction action);

  FileSystem& base_;
  mutable std::mutex mu_;
  std::vector<Rule> rules_;
  std::vector<CrashRule> crash_rules_;
  std::map<FsOp, int64_t> calls_;
  std::vector<std::string> log_;
  std::map<std::string, int64_t> synced_size_;  // files written through us -> bytes made durable
  int64_t crash_budget_ = -1;                   // bytes until the crash; -1 = never
  CrashAction crash_action_ = CrashAction::kThrow;
  bool crashed_ = false;
  int64_t bytes_written_ = 0;
};

}  // namespace mtrain
