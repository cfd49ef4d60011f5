// Per-file checksums for the checkpoint manifest: size + CRC-32, streamed.
// The CRC is zlib's crc32 (ISO-HDLC / IEEE 802.3 polynomial, the one of
// gzip, zip and PNG): an operator can recompute it without mtrain, e.g.
// python3 -c "import zlib,sys; print('%08x' % zlib.crc32(open(sys.argv[1],'rb').read()))" f.
// It detects corruption (flipped bits, torn writes), not tampering.
// (Debian has no libcrc32c package; see third_party_notes/README.md.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/file_system.h"

namespace mtrain::checkpoint {

class Crc32 {
 public:
  void update(std::span<const std::byte> data);
  uint32_t value() const { return crc_; }

 private:
  uint32_t crc_ = 0;
};

uint32_t crc32_of(std::span<const std::byte> data);
std::string crc32_hex(uint32_t crc);  // 8 lowercase hex digits, as the manifest stores it

struct FileDigest {
  int64_t size = 0;
  uint32_t crc32 = 0;
  bool operator==(const FileDigest&) const = default;
};

// Streams the whole file (1 MiB reads). Throws CheckpointError naming the file.
FileDigest digest_file(FileSystem& fs, const std::string& path);

// Checks size first (cheap), then the CRC. Throws CheckpointError, e.g.
// "<path>: size 1000 bytes, the manifest says 1024 (truncated?)" or
// "<path>: checksum mismatch: crc32 is 1a2b3c4d, the manifest says 5e6f7a8b".
void verify_file_digest(FileSystem& fs, const std::string& path, const FileDigest& expected);

// A WritableFile that checksums the bytes it passes on, so a writer learns
// the digest of what it wrote without reading the file back.
class ChecksummingFile final : public WritableFile {
 public:
  explicit ChecksummingFile(WritableFile& inner) : inner_(inner) {}
  using WritableFile::append;
  void append(std::span<const std::byte> data) override;
  void sync() override { inner_.sync(); }
  void close() override { inner_.close(); }
  const std::string& path() const override { return inner_.path(); }
  int64_t size() const override { return inner_.size(); }
  FileDigest digest() const { return {inner_.size(), crc_.value()}; }

 private:
  WritableFile& inner_;
  Crc32 crc_;
};

}  // namespace mtrain::checkpoint
