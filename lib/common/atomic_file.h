// Atomic file replacement on top of the FileSystem seam (leveldb's
// SetCurrentFile, torch DCP's .metadata): the bytes go to "<path>.tmp" in the
// same directory, which is fsynced and closed, renamed over <path>, and then
// the directory is fsynced. A reader therefore sees either the old file or
// the complete new one, also after a kill or a power loss at any point.
//
// On an error before the rename the temporary file is removed (best effort)
// and the error is rethrown unchanged; <path> is untouched. A process killed
// mid-write leaves "<path>.tmp" behind: the next write to <path> truncates
// and reuses it. Two writers of the same <path> at once are a caller bug.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "common/file_system.h"

namespace mtrain {

// The temporary name write_file_atomic uses for `path`.
std::string temp_path_for(const std::string& path);

// Writes the bytes `write_body` appends to its argument as `path`, atomically.
// Throws what write_body or the FileSystem throws (IoError for I/O failures).
void write_file_atomic(FileSystem& fs, const std::string& path, const std::function<void(WritableFile&)>& write_body,
                       mode_t mode = kDefaultFileMode);
void write_file_atomic(FileSystem& fs, const std::string& path, std::string_view contents,
                       mode_t mode = kDefaultFileMode);

// For pointer files such as the checkpoint tracker: at most kMaxSmallTextBytes
// of text without NUL bytes, replaced atomically / read with that bound.
inline constexpr int64_t kMaxSmallTextBytes = 4096;
void replace_text_file_atomic(FileSystem& fs, const std::string& path, std::string_view text,
                              mode_t mode = kDefaultFileMode);
// Throws IoError when the file is missing, too large or holds a NUL byte.
std::string read_small_text_file(FileSystem& fs, const std::string& path);

}  // namespace mtrain
