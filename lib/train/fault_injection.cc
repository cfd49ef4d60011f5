#include "train/fault_injection.h"

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <thread>

#include "checkpoint/sharded_checkpoint.h"
#include "common/atomic_file.h"
#include "common/errors.h"

namespace mtrain::train {

namespace {

using Kind = InjectedFault::Kind;
using SavePoint = InjectedFault::SavePoint;

constexpr const char* kSpecHint = "MTRAIN_FAULT is a test seam (docs/LAUNCH.md); unset it for real runs";

// A whole number: digits (a leading - for negatives), nothing else.
template <class Int>
bool parse_int(std::string_view s, Int* out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

std::optional<Kind> kind_named(std::string_view name) {
  if (name == "hang") return Kind::kHang;
  if (name == "exit") return Kind::kExit;
  if (name == "save_kill") return Kind::kSaveKill;
  if (name == "save_enospc") return Kind::kSaveEnospc;
  if (name == "save_hang") return Kind::kSaveHang;
  return std::nullopt;
}

std::optional<SavePoint> point_named(std::string_view name) {
  if (name == "shard") return SavePoint::kShard;
  if (name == "rename") return SavePoint::kRename;
  if (name == "tracker") return SavePoint::kTracker;
  return std::nullopt;
}

// "mtrain: injected fault (MTRAIN_FAULT=<spec>): rank <r> <what>" on stderr.
void announce(const InjectedFault& f, const std::string& what) {
  std::fflush(stdout);
  std::fprintf(stderr, "mtrain: injected fault (MTRAIN_FAULT=%s): rank %d %s\n", f.spec.c_str(), f.rank, what.c_str());
  std::fflush(stderr);
}

[[noreturn]] void sleep_forever() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

// What a save fault does, for its announcement.
std::string save_fault_text(const InjectedFault& f) {
  const std::string save = fmt::format("the save of iteration {}", f.iteration);
  if (f.kind == Kind::kSaveEnospc) return fmt::format("fails its first write of {} with ENOSPC", save);
  if (f.kind == Kind::kSaveHang) return fmt::format("blocks forever in {}", save);
  switch (f.point) {
    case SavePoint::kShard:
      return fmt::format("is killed (SIGKILL) in {} once {} bytes of its shard reached the disk", save,
                         kSaveKillShardBytes);
    case SavePoint::kRename:
      return fmt::format("is killed (SIGKILL) in {} just before {}.tmp is renamed into place", save,
                         checkpoint::iteration_dir_name(f.iteration));
    case SavePoint::kTracker:
      return fmt::format("is killed (SIGKILL) in {} just before {} is replaced", save, checkpoint::kTrackerFileName);
  }
  return save;
}

}  // namespace

std::optional<InjectedFault> parse_injected_fault(const char* fault_rank, const char* fault) {
  if (!fault || !*fault) return std::nullopt;
  InjectedFault f;
  f.spec = fault;
  const std::string_view spec = f.spec;
  const size_t at = spec.find('@');
  const size_t colon = spec.find(':', at == std::string_view::npos ? spec.size() : at);
  const std::optional<Kind> kind = kind_named(spec.substr(0, at));
  const bool numbered =
      at != std::string_view::npos &&
      parse_int(spec.substr(at + 1, colon == std::string_view::npos ? colon : colon - at - 1), &f.iteration);
  const std::optional<SavePoint> point =
      colon == std::string_view::npos ? std::nullopt : point_named(spec.substr(colon + 1));
  // Only save_kill takes a point, and it needs one.
  const bool point_ok = kind == Kind::kSaveKill ? point.has_value() : colon == std::string_view::npos;
  if (!kind || !numbered || f.iteration < 1 || !point_ok) {
    throw UsageError(fmt::format("MTRAIN_FAULT={}: expected hang@<iteration>, exit@<iteration>, "
                                 "save_kill@<iteration>:shard|rename|tracker, save_enospc@<iteration> or "
                                 "save_hang@<iteration>",
                                 spec),
                     kSpecHint);
  }
  f.kind = *kind;
  f.point = point.value_or(SavePoint::kShard);
  if (fault_rank && *fault_rank) {
    if (!parse_int(fault_rank, &f.rank) || f.rank < 0) {
      throw UsageError(fmt::format("MTRAIN_FAULT_RANK={}: expected a rank number >= 0", fault_rank),
                       "MTRAIN_FAULT_RANK is a test seam (docs/LAUNCH.md); unset it for real runs");
    }
  }
  if (f.kind == Kind::kSaveKill && f.point != SavePoint::kShard && f.rank != 0) {
    throw UsageError(fmt::format("MTRAIN_FAULT={} with MTRAIN_FAULT_RANK={}: only rank 0 renames the checkpoint "
                                 "and replaces the tracker",
                                 spec, f.rank),
                     kSpecHint);
  }
  return f;
}

SaveFaultFileSystem::SaveFaultFileSystem(InjectedFault fault) : fault_(std::move(fault)) {
  using Crash = FaultInjectingFileSystem::CrashAction;
  const std::string iter_tmp = checkpoint::iteration_dir_name(fault_.iteration) + ".tmp";
  const std::string tracker_tmp = temp_path_for(checkpoint::kTrackerFileName);
  if (fault_.kind == Kind::kSaveEnospc) injecting_.fail(FsOp::kWrite, 1, ENOSPC);
  if (fault_.kind != Kind::kSaveKill) return;
  switch (fault_.point) {
    case SavePoint::kShard:
      injecting_.crash_after_bytes(kSaveKillShardBytes, Crash::kKill);
      break;
    case SavePoint::kRename:
      injecting_.crash_at(FsOp::kRename, 1, iter_tmp, Crash::kKill);
      break;
    case SavePoint::kTracker:
      injecting_.crash_at(FsOp::kRename, 1, tracker_tmp, Crash::kKill);
      break;
  }
}

void SaveFaultFileSystem::arm_for(int64_t iteration) {
  const bool arm = iteration == fault_.iteration;
  if (arm && !armed_) announce(fault_, save_fault_text(fault_));
  armed_ = arm;
}

FileSystem& SaveFaultFileSystem::target() {
  if (!armed_) return real_;
  if (fault_.kind == Kind::kSaveHang) {
    announce(fault_, "hangs in the checkpoint save");
    sleep_forever();  // the save-timeout watchdog must end the job
  }
  return injecting_;
}

void SaveFaultFileSystem::create_dirs(const std::string& path, mode_t mode) { target().create_dirs(path, mode); }
std::unique_ptr<WritableFile> SaveFaultFileSystem::open_for_write(const std::string& path, mode_t mode) {
  return target().open_for_write(path, mode);
}
std::unique_ptr<ReadableFile> SaveFaultFileSystem::open_for_read(const std::string& path) {
  return target().open_for_read(path);
}
void SaveFaultFileSystem::rename(const std::string& from, const std::string& to) { target().rename(from, to); }
void SaveFaultFileSystem::exchange(const std::string& a, const std::string& b) { target().exchange(a, b); }
void SaveFaultFileSystem::sync_dir(const std::string& path) { target().sync_dir(path); }
void SaveFaultFileSystem::remove_all(const std::string& path) { target().remove_all(path); }
bool SaveFaultFileSystem::exists(const std::string& path) { return target().exists(path); }
int64_t SaveFaultFileSystem::file_size(const std::string& path) { return target().file_size(path); }
std::vector<DirEntry> SaveFaultFileSystem::list_dir(const std::string& path) { return target().list_dir(path); }
int64_t SaveFaultFileSystem::free_bytes(const std::string& path) { return target().free_bytes(path); }

std::unique_ptr<FileSystem> checkpoint_file_system(const std::optional<InjectedFault>& fault) {
  if (fault && fault->in_save()) return std::make_unique<SaveFaultFileSystem>(*fault);
  return std::make_unique<PosixFileSystem>();
}

FaultInjectionHook::FaultInjectionHook(InjectedFault fault, int rank, FileSystem& fs)
    : fault_(std::move(fault)), rank_(rank), save_fs_(dynamic_cast<SaveFaultFileSystem*>(&fs)) {}

void FaultInjectionHook::on_step_begin(int64_t iteration) {
  if (rank_ != fault_.rank) return;
  if (fault_.in_save()) {
    if (save_fs_) save_fs_->arm_for(iteration);
    return;
  }
  if (iteration != fault_.iteration) return;
  const bool hang = fault_.kind == Kind::kHang;
  announce(fault_, fmt::format("{} at the start of iteration {}", hang ? "hangs" : "exits with code 1", iteration));
  if (!hang) std::_Exit(1);  // like a crash: no unwinding, no MPI_Finalize
  sleep_forever();
}

}  // namespace mtrain::train
