#include "common/fault_file_system.h"

#include <algorithm>
#include <csignal>
#include <optional>
#include <string_view>

#include "fmt/format.h"

namespace mtrain {

const char* fs_op_name(FsOp op) {
  switch (op) {
    case FsOp::kCreateDirs:
      return "mkdir";
    case FsOp::kOpenWrite:
      return "open_write";
    case FsOp::kWrite:
      return "write";
    case FsOp::kSync:
      return "fsync";
    case FsOp::kClose:
      return "close";
    case FsOp::kRename:
      return "rename";
    case FsOp::kSyncDir:
      return "sync_dir";
    case FsOp::kRemove:
      return "remove";
    case FsOp::kOpenRead:
      return "open_read";
    case FsOp::kRead:
      return "read";
  }
  return "?";
}

class FaultWritableFile final : public WritableFile {
 public:
  FaultWritableFile(FaultInjectingFileSystem& fs, std::unique_ptr<WritableFile> base)
      : fs_(fs), base_(std::move(base)) {}

  using WritableFile::append;
  void append(std::span<const std::byte> data) override {
    std::lock_guard lock(fs_.mu_);
    fs_.before(FsOp::kWrite, path(), std::to_string(data.size()));
    const auto n = static_cast<int64_t>(data.size());
    const int64_t allowed = fs_.allowed_bytes(n);
    if (allowed < n) {
      base_->append(data.first(static_cast<size_t>(allowed)));
      fs_.bytes_written_ += allowed;
      fs_.die(path(), fs_.crash_action_);
    }
    base_->append(data);
    fs_.bytes_written_ += n;
    if (fs_.crash_budget_ >= 0) fs_.crash_budget_ -= n;
  }

  void sync() override {
    std::lock_guard lock(fs_.mu_);
    fs_.before(FsOp::kSync, path(), "");
    base_->sync();
    fs_.synced_size_[path()] = base_->size();
  }

  void close() override {
    std::lock_guard lock(fs_.mu_);
    fs_.before(FsOp::kClose, path(), "");
    base_->close();
  }

  const std::string& path() const override { return base_->path(); }
  int64_t size() const override { return base_->size(); }

 private:
  FaultInjectingFileSystem& fs_;
  std::unique_ptr<WritableFile> base_;
};

class FaultReadableFile final : public ReadableFile {
 public:
  FaultReadableFile(FaultInjectingFileSystem& fs, std::unique_ptr<ReadableFile> base)
      : fs_(fs), base_(std::move(base)) {}

  void read_at(int64_t offset, std::span<std::byte> out) override {
    {
      std::lock_guard lock(fs_.mu_);
      fs_.before(FsOp::kRead, path(), fmt::format("{}@{}", out.size(), offset));
    }
    base_->read_at(offset, out);
  }
  int64_t size() const override { return base_->size(); }
  const std::string& path() const override { return base_->path(); }

 private:
  FaultInjectingFileSystem& fs_;
  std::unique_ptr<ReadableFile> base_;
};

void FaultInjectingFileSystem::fail(FsOp op, int64_t nth, int err, std::string path_contains) {
  std::lock_guard lock(mu_);
  rules_.push_back({op, nth, err, std::move(path_contains)});
}

void FaultInjectingFileSystem::crash_after_bytes(int64_t bytes, CrashAction action) {
  std::lock_guard lock(mu_);
  crash_budget_ = bytes;
  crash_action_ = action;
}

void FaultInjectingFileSystem::crash_at(FsOp op, int64_t nth, std::string name, CrashAction action) {
  std::lock_guard lock(mu_);
  crash_rules_.push_back({op, nth, std::move(name), action});
}

std::vector<std::string> FaultInjectingFileSystem::log() const {
  std::lock_guard lock(mu_);
  return log_;
}

bool FaultInjectingFileSystem::crashed() const {
  std::lock_guard lock(mu_);
  return crashed_;
}

int64_t FaultInjectingFileSystem::bytes_written() const {
  std::lock_guard lock(mu_);
  return bytes_written_;
}

int64_t FaultInjectingFileSystem::calls(FsOp op) const {
  std::lock_guard lock(mu_);
  const auto it = calls_.find(op);
  return it == calls_.end() ? 0 : it->second;
}

void FaultInjectingFileSystem::before(FsOp op, const std::string& path, const std::string& what) {
  if (crashed_) throw SimulatedCrash("simulated crash: the process is dead (" + std::string(fs_op_name(op)) + ")");
  ++calls_[op];
  log_.push_back(fmt::format("{} {}{}{}", fs_op_name(op), path, what.empty() ? "" : " ", what));
  const std::string_view name = std::string_view(path).substr(path.find_last_of('/') + 1);
  for (CrashRule& r : crash_rules_) {
    if (r.op == op && name == r.name && ++r.seen == r.nth) die(path, r.action);
  }
  for (Rule& r : rules_) {
    if (r.op != op || path.find(r.path_contains) == std::string::npos) continue;
    if (++r.seen == r.nth) throw IoError(fs_op_name(op), path, r.err, "injected fault");
  }
}

int64_t FaultInjectingFileSystem::allowed_bytes(int64_t n) const {
  return crash_budget_ < 0 ? n : std::min(n, crash_budget_);
}

void FaultInjectingFileSystem::die(const std::string& path, CrashAction action) {
  crashed_ = true;
  log_.push_back("crash " + path);
  if (action == CrashAction::kKill) std::raise(SIGKILL);
  throw SimulatedCrash("simulated crash while writing " + path);
}

void FaultInjectingFileSystem::drop_unsynced_data() {
  std::lock_guard lock(mu_);
  for (const auto& [path, synced] : synced_size_) {
    if (!base_.exists(path)) continue;
    const std::string kept = base_.read_file(path, INT64_MAX).substr(0, static_cast<size_t>(synced));
    std::unique_ptr<WritableFile> f = base_.open_for_write(path);
    f->append(kept);
    f->sync();
    f->close();
  }
}

void FaultInjectingFileSystem::create_dirs(const std::string& path, mode_t mode) {
  std::lock_guard lock(mu_);
  before(FsOp::kCreateDirs, path, "");
  base_.create_dirs(path, mode);
}

std::unique_ptr<WritableFile> FaultInjectingFileSystem::open_for_write(const std::string& path, mode_t mode) {
  std::lock_guard lock(mu_);
  before(FsOp::kOpenWrite, path, "");
  auto f = base_.open_for_write(path, mode);
  synced_size_[path] = 0;
  return std::make_unique<FaultWritableFile>(*this, std::move(f));
}

std::unique_ptr<ReadableFile> FaultInjectingFileSystem::open_for_read(const std::string& path) {
  std::lock_guard lock(mu_);
  before(FsOp::kOpenRead, path, "");
  return std::make_unique<FaultReadableFile>(*this, base_.open_for_read(path));
}

void FaultInjectingFileSystem::exchange(const std::string& a, const std::string& b) {
  std::lock_guard lock(mu_);
  before(FsOp::kRename, a, "<-> " + b);
  base_.exchange(a, b);
  const auto sa = synced_size_.find(a), sb = synced_size_.find(b);
  const std::optional<int64_t> va = sa == synced_size_.end() ? std::nullopt : std::optional(sa->second);
  const std::optional<int64_t> vb = sb == synced_size_.end() ? std::nullopt : std::optional(sb->second);
  synced_size_.erase(a);
  synced_size_.erase(b);
  if (va) synced_size_[b] = *va;
  if (vb) synced_size_[a] = *vb;
}

void FaultInjectingFileSystem::rename(const std::string& from, const std::string& to) {
  std::lock_guard lock(mu_);
  before(FsOp::kRename, from, "-> " + to);
  base_.rename(from, to);
  if (const auto it = synced_size_.find(from); it != synced_size_.end()) {
    synced_size_[to] = it->second;
    synced_size_.erase(from);
  }
}

void FaultInjectingFileSystem::sync_dir(const std::string& path) {
  std::lock_guard lock(mu_);
  before(FsOp::kSyncDir, path, "");
  base_.sync_dir(path);
}

void FaultInjectingFileSystem::remove_all(const std::string& path) {
  std::lock_guard lock(mu_);
  before(FsOp::kRemove, path, "");
  base_.remove_all(path);
  std::erase_if(synced_size_, [&](const auto& kv) {
    return kv.first == path || (kv.first.size() > path.size() && kv.first.compare(0, path.size(), path) == 0 &&
                                kv.first[path.size()] == '/');
  });
}

bool FaultInjectingFileSystem::exists(const std::string& path) {
  std::lock_guard lock(mu_);
  if (crashed_) throw SimulatedCrash("simulated crash: the process is dead (exists)");
  return base_.exists(path);
}

int64_t FaultInjectingFileSystem::file_size(const std::string& path) {
  std::lock_guard lock(mu_);
  if (crashed_) throw SimulatedCrash("simulated crash: the process is dead (file_size)");
  return base_.file_size(path);
}

std::vector<DirEntry> FaultInjectingFileSystem::list_dir(const std::string& path) {
  std::lock_guard lock(mu_);
  if (crashed_) throw SimulatedCrash("simulated crash: the process is dead (list_dir)");
  return base_.list_dir(path);
}

int64_t FaultInjectingFileSystem::free_bytes(const std::string& path) {
  std::lock_guard lock(mu_);
  if (crashed_) throw SimulatedCrash("simulated crash: the process is dead (free_bytes)");
  return base_.free_bytes(path);
}

}  // namespace mtrain
