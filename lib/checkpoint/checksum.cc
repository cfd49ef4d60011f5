#include "checkpoint/checksum.h"

#include <zlib.h>

#include <algorithm>
#include <vector>

#include "common/errors.h"
#include "fmt/format.h"

namespace mtrain::checkpoint {
namespace {

constexpr int64_t kReadChunk = 1 << 20;

}  // namespace

void Crc32::update(std::span<const std::byte> data) {
  // crc32_z takes a size_t length, so no 4 GiB split is needed.
  crc_ = static_cast<uint32_t>(crc32_z(crc_, reinterpret_cast<const Bytef*>(data.data()), data.size()));
}

uint32_t crc32_of(std::span<const std::byte> data) {
  Crc32 c;
  c.update(data);
  return c.value();
}

std::string crc32_hex(uint32_t crc) { return fmt::format("{:08x}", crc); }

FileDigest digest_file(FileSystem& fs, const std::string& path) {
  try {
    std::unique_ptr<ReadableFile> f = fs.open_for_read(path);
    std::vector<std::byte> buf(static_cast<size_t>(std::min<int64_t>(kReadChunk, f->size())));
    Crc32 crc;
    for (int64_t off = 0; off < f->size(); off += kReadChunk) {
      const auto n = static_cast<size_t>(std::min<int64_t>(kReadChunk, f->size() - off));
      f->read_at(off, std::span(buf.data(), n));
      crc.update(std::span(buf.data(), n));
    }
    return {f->size(), crc.value()};
  } catch (const IoError& e) {
    throw CheckpointError(fmt::format("cannot checksum checkpoint file: {}", e.what()));
  }
}

void verify_file_digest(FileSystem& fs, const std::string& path, const FileDigest& expected) {
  int64_t size = 0;
  try {
    size = fs.file_size(path);
  } catch (const IoError& e) {
    throw CheckpointError(fmt::format("checkpoint file missing or unreadable: {}", e.what()),
                          "the checkpoint is incomplete; load an older one explicitly");
  }
  if (size != expected.size) {
    throw CheckpointError(fmt::format("{}: size {} bytes, the manifest says {}{}", path, size, expected.size,
                                      size < expected.size ? " (truncated?)" : ""),
                          "the checkpoint is damaged; load an older one explicitly");
  }
  const FileDigest actual = digest_file(fs, path);
  if (actual.crc32 != expected.crc32) {
    throw CheckpointError(fmt::format("{}: checksum mismatch: crc32 is {}, the manifest says {}", path,
                                      crc32_hex(actual.crc32), crc32_hex(expected.crc32)),
                          "the checkpoint is damaged; load an older one explicitly");
  }
}

void ChecksummingFile::append(std::span<const std::byte> data) {
  inner_.append(data);  // checksum only what was written
  crc_.update(data);
}

}  // namespace mtrain::checkpoint
