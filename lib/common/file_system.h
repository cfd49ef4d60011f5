// File-system seam (leveldb's Env, reduced to what durable saves need). Every
// byte mtrain persists durably goes through a FileSystem, so a test can swap in
// FaultInjectingFileSystem (fault_file_system.h) to fail the k-th write with
// ENOSPC, kill the writer after N bytes or drop unsynced data.
//
// PosixFileSystem sets permissions explicitly (chmod/fchmod after creating),
// so the result does not depend on the process umask, and it refuses
// world-writable modes. Defaults: directories 0750, files 0640.
//
// Failures are IoError (operation, path, errno, detail). IoError is not an
// mtrain::Error on purpose: the caller knows the failure class (checkpoint,
// data, ...) and rethrows it with context and the right exit code.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mtrain {

inline constexpr mode_t kDefaultDirMode = 0750;
inline constexpr mode_t kDefaultFileMode = 0640;

class IoError : public std::runtime_error {
 public:
  // Message: "<op> <path>: <strerror(err)> (<detail>)"; err 0 = not from a system call.
  IoError(std::string op, std::string path, int err, std::string detail = "");
  const std::string& op() const { return op_; }
  const std::string& path() const { return path_; }
  int error_number() const { return err_; }
  const std::string& detail() const { return detail_; }

 private:
  std::string op_;
  std::string path_;
  int err_;
  std::string detail_;
};

// A file being written from the start. append writes all bytes or throws.
// The destructor closes a file that is still open (no sync, errors ignored):
// call close() to learn about errors.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual void append(std::span<const std::byte> data) = 0;
  void append(std::string_view text) { append(std::as_bytes(std::span(text.data(), text.size()))); }
  virtual void sync() = 0;   // fsync: data and size are durable when it returns
  virtual void close() = 0;  // idempotent
  virtual const std::string& path() const = 0;
  virtual int64_t size() const = 0;  // bytes appended so far
};

// A file opened for positioned reads; size() is the size at open time.
class ReadableFile {
 public:
  virtual ~ReadableFile() = default;
  // Reads exactly out.size() bytes at `offset`, or throws IoError (also at end of file).
  virtual void read_at(int64_t offset, std::span<std::byte> out) = 0;
  virtual int64_t size() const = 0;
  virtual const std::string& path() const = 0;
};

struct DirEntry {
  std::string name;
  bool is_dir = false;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  // mkdir -p: creates each missing component with `mode`; existing ones are left alone.
  virtual void create_dirs(const std::string& path, mode_t mode = kDefaultDirMode) = 0;
  // Creates or truncates a regular file (never follows a symlink at `path`).
  virtual std::unique_ptr<WritableFile> open_for_write(const std::string& path, mode_t mode = kDefaultFileMode) = 0;
  // Opens a regular file (a directory or a device is refused).
  virtual std::unique_ptr<ReadableFile> open_for_read(const std::string& path) = 0;
  // rename(2): atomic; replaces a file, or an empty directory, at `to`.
  virtual void rename(const std::string& from, const std::string& to) = 0;
  // Swaps two existing paths atomically (renameat2 RENAME_EXCHANGE): a
  // reader sees either name pointing at one complete directory or the other,
  // never a gap. Throws IoError; EINVAL / ENOTSUP when the file system cannot.
  virtual void exchange(const std::string& a, const std::string& b) = 0;
  // fsync of a directory: makes creations, renames and removals in it durable.
  virtual void sync_dir(const std::string& path) = 0;
  // rm -rf; a missing path is not an error. Symlinks are removed, not followed.
  virtual void remove_all(const std::string& path) = 0;
  virtual bool exists(const std::string& path) = 0;
  virtual int64_t file_size(const std::string& path) = 0;
  virtual std::vector<DirEntry> list_dir(const std::string& path) = 0;  // sorted by name
  // Bytes available to this user on the file system holding `path`; -1 if unknown.
  virtual int64_t free_bytes(const std::string& path) = 0;

  // Reads a whole file; throws IoError when it is larger than max_bytes.
  std::string read_file(const std::string& path, int64_t max_bytes);
};

class PosixFileSystem final : public FileSystem {
 public:
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
};

// Throws IoError (EINVAL) when `mode` has the world-write bit or bits outside 07777.
void check_mode(mode_t mode, const std::string& path);

// The directory holding `path` ("." for a bare name, "/" for "/x").
std::string parent_dir(const std::string& path);

}  // namespace mtrain
