#include "common/atomic_file.h"

#include <cerrno>

#include "fmt/format.h"

namespace mtrain {
namespace {

void check_small_text(std::string_view text, const std::string& path, const char* op) {
  if (static_cast<int64_t>(text.size()) > kMaxSmallTextBytes) {
    throw IoError(op, path, EFBIG, fmt::format("{} bytes, more than the {} allowed", text.size(), kMaxSmallTextBytes));
  }
  if (text.find('\0') != std::string_view::npos) throw IoError(op, path, EINVAL, "holds a NUL byte: not a text file");
}

}  // namespace

std::string temp_path_for(const std::string& path) { return path + ".tmp"; }

void write_file_atomic(FileSystem& fs, const std::string& path, const std::function<void(WritableFile&)>& write_body,
                       mode_t mode) {
  const std::string tmp = temp_path_for(path);
  try {
    std::unique_ptr<WritableFile> f = fs.open_for_write(tmp, mode);
    write_body(*f);
    f->sync();  // the data must be durable before the name points at it
    f->close();
    fs.rename(tmp, path);
  } catch (...) {
    try {
      fs.remove_all(tmp);
    } catch (...) {
      // Best effort: the original error is the one to report. (After a
      // simulated crash the removal fails too and the temp file stays, as
      // it would after a real kill.)
    }
    throw;
  }
  fs.sync_dir(parent_dir(path));  // makes the rename itself durable
}

void write_file_atomic(FileSystem& fs, const std::string& path, std::string_view contents, mode_t mode) {
  write_file_atomic(
      fs, path, [&](WritableFile& f) { f.append(contents); }, mode);
}

void replace_text_file_atomic(FileSystem& fs, const std::string& path, std::string_view text, mode_t mode) {
  check_small_text(text, path, "write");
  write_file_atomic(fs, path, text, mode);
}

std::string read_small_text_file(FileSystem& fs, const std::string& path) {
  std::string text = fs.read_file(path, kMaxSmallTextBytes);
  check_small_text(text, path, "read");
  return text;
}

}  // namespace mtrain
