#include "common/file_system.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "fmt/format.h"

namespace mtrain {
namespace {

namespace stdfs = std::filesystem;

std::string io_message(const std::string& op, const std::string& path, int err, const std::string& detail) {
  std::string m = op + " " + path + ": " + (err != 0 ? std::strerror(err) : "failed");
  if (!detail.empty()) m += " (" + detail + ")";
  return m;
}

// Retries on EINTR; returns the final result of the call.
template <typename F>
auto retry_eintr(F f) {
  for (;;) {
    auto r = f();
    if (r >= 0 || errno != EINTR) return r;
  }
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  using WritableFile::append;
  void append(std::span<const std::byte> data) override {
    if (fd_ < 0) throw IoError("write", path_, EBADF, "file already closed");
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = ::write(fd_, data.data() + done, data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = n < 0 ? errno : EIO;
        throw IoError("write", path_, err,
                      fmt::format("{} bytes written to the file, {} of a {}-byte write failed", size_ + done,
                                  data.size() - done, data.size()));
      }
      done += static_cast<size_t>(n);
    }
    size_ += static_cast<int64_t>(done);
  }

  void sync() override {
    if (fd_ < 0) throw IoError("fsync", path_, EBADF, "file already closed");
    if (retry_eintr([&] { return ::fsync(fd_); }) != 0) throw IoError("fsync", path_, errno);
  }

  void close() override {
    if (fd_ < 0) return;
    const int fd = fd_;
    fd_ = -1;
    // close(2) must not be retried on EINTR on Linux: the descriptor is gone either way.
    if (::close(fd) != 0) throw IoError("close", path_, errno);
  }

  const std::string& path() const override { return path_; }
  int64_t size() const override { return size_; }

 private:
  std::string path_;
  int fd_;
  int64_t size_ = 0;
};

class PosixReadableFile final : public ReadableFile {
 public:
  PosixReadableFile(std::string path, int fd, int64_t size) : path_(std::move(path)), fd_(fd), size_(size) {}
  ~PosixReadableFile() override { ::close(fd_); }

  void read_at(int64_t offset, std::span<std::byte> out) override {
    const auto want = static_cast<int64_t>(out.size());
    if (offset < 0 || want > size_ || offset > size_ - want) {
      throw IoError("read", path_, 0,
                    fmt::format("{} bytes at offset {} are past the end of the {}-byte file", want, offset, size_));
    }
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, offset + static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw IoError("read", path_, errno, fmt::format("{} bytes at offset {}", want, offset));
      if (n == 0) {
        throw IoError("read", path_, 0,
                      fmt::format("unexpected end of file at offset {}: the file shrank below {} bytes",
                                  offset + static_cast<int64_t>(done), size_));
      }
      done += static_cast<size_t>(n);
    }
  }

  int64_t size() const override { return size_; }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  int fd_;
  int64_t size_;
};

void make_one_dir(const std::string& dir, mode_t mode) {
  if (::mkdir(dir.c_str(), mode) == 0) {
    // mkdir's mode is filtered by the umask: set it explicitly.
    if (::chmod(dir.c_str(), mode) != 0) throw IoError("chmod", dir, errno);
    return;
  }
  const int err = errno;
  struct stat st {};
  if (err == EEXIST && ::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return;
    throw IoError("mkdir", dir, ENOTDIR, "exists and is not a directory");
  }
  throw IoError("mkdir", dir, err);
}

}  // namespace

IoError::IoError(std::string op, std::string path, int err, std::string detail)
    : std::runtime_error(io_message(op, path, err, detail)),
      op_(std::move(op)),
      path_(std::move(path)),
      err_(err),
      detail_(std::move(detail)) {}

void check_mode(mode_t mode, const std::string& path) {
  if ((mode & ~static_cast<mode_t>(07777)) != 0 || (mode & S_IWOTH) != 0) {
    throw IoError("chmod", path, EINVAL, fmt::format("refusing mode {:04o}: world-writable or not a mode", mode));
  }
}

std::string parent_dir(const std::string& path) {
  const stdfs::path parent = stdfs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

std::string FileSystem::read_file(const std::string& path, int64_t max_bytes) {
  std::unique_ptr<ReadableFile> f = open_for_read(path);
  if (f->size() > max_bytes) {
    throw IoError("read", path, EFBIG, fmt::format("{} bytes, more than the {} bytes expected", f->size(), max_bytes));
  }
  std::string out(static_cast<size_t>(f->size()), '\0');
  f->read_at(0, std::as_writable_bytes(std::span(out.data(), out.size())));
  return out;
}

void PosixFileSystem::create_dirs(const std::string& path, mode_t mode) {
  check_mode(mode, path);
  if (path.empty()) throw IoError("mkdir", path, ENOENT, "empty path");
  stdfs::path so_far;
  for (const stdfs::path& part : stdfs::path(path)) {
    so_far /= part;
    if (part == "/" || part == "." || part == ".." || part.empty()) continue;
    make_one_dir(so_far.string(), mode);
  }
}

std::unique_ptr<WritableFile> PosixFileSystem::open_for_write(const std::string& path, mode_t mode) {
  check_mode(mode, path);
  const int fd =
      retry_eintr([&] { return ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode); });
  if (fd < 0) throw IoError("open", path, errno, "for writing");
  auto file = std::make_unique<PosixWritableFile>(path, fd);
  // open's mode is filtered by the umask and ignored for an existing file.
  if (::fchmod(fd, mode) != 0) throw IoError("chmod", path, errno);
  return file;
}

std::unique_ptr<ReadableFile> PosixFileSystem::open_for_read(const std::string& path) {
  const int fd = retry_eintr([&] { return ::open(path.c_str(), O_RDONLY | O_CLOEXEC); });
  if (fd < 0) throw IoError("open", path, errno, "for reading");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw IoError("stat", path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IoError("open", path, EINVAL, "not a regular file");
  }
  return std::make_unique<PosixReadableFile>(path, fd, static_cast<int64_t>(st.st_size));
}

void PosixFileSystem::rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) throw IoError("rename", from, errno, "to " + to);
}

void PosixFileSystem::exchange(const std::string& a, const std::string& b) {
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) != 0)
    throw IoError("rename", a, errno, "exchange with " + b);
}

void PosixFileSystem::sync_dir(const std::string& path) {
  const int fd = retry_eintr([&] { return ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); });
  if (fd < 0) throw IoError("open", path, errno, "directory, to fsync it");
  const int rc = retry_eintr([&] { return ::fsync(fd); });
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw IoError("fsync", path, err, "directory");
}

void PosixFileSystem::remove_all(const std::string& path) {
  std::error_code ec;
  stdfs::remove_all(path, ec);
  if (ec) throw IoError("remove", path, ec.value());
}

bool PosixFileSystem::exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

int64_t PosixFileSystem::file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw IoError("stat", path, errno);
  if (!S_ISREG(st.st_mode)) throw IoError("stat", path, EINVAL, "not a regular file");
  return static_cast<int64_t>(st.st_size);
}

std::vector<DirEntry> PosixFileSystem::list_dir(const std::string& path) {
  std::vector<DirEntry> out;
  std::error_code ec;
  for (stdfs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    const stdfs::file_status st = it->symlink_status(ec);  // a symlink to a directory is not a directory here
    if (ec) break;
    out.push_back({it->path().filename().string(), stdfs::is_directory(st)});
  }
  if (ec) throw IoError("list", path, ec.value());
  std::sort(out.begin(), out.end(), [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  return out;
}

int64_t PosixFileSystem::free_bytes(const std::string& path) {
  struct statvfs s {};
  if (::statvfs(path.c_str(), &s) != 0) return -1;
  return static_cast<int64_t>(s.f_bavail) * static_cast<int64_t>(s.f_frsize);
}

}  // namespace mtrain
