// Test helpers for the file-system seam: a fresh temporary directory per
// test (removed afterwards), the permission bits of a path, and the IoError
// (or nothing) a call throws.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>

#include "common/file_system.h"

namespace mtrain::testing {

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/mtrain_fs_XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline mode_t mode_of(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return static_cast<mode_t>(-1);
  return st.st_mode & 07777;
}

// Sets the process umask for the scope (umask is process-wide: tests run serially).
class ScopedUmask {
 public:
  explicit ScopedUmask(mode_t m) : old_(::umask(m)) {}
  ~ScopedUmask() { ::umask(old_); }

 private:
  mode_t old_;
};

inline std::string slurp(const std::string& path) {
  PosixFileSystem fs;
  return fs.read_file(path, 1 << 30);
}

inline void put(const std::string& path, const std::string& contents) {
  PosixFileSystem fs;
  auto f = fs.open_for_write(path);
  f->append(contents);
  f->close();
}

}  // namespace mtrain::testing
