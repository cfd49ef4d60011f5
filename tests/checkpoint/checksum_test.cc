// CRC-32 and file digests for the manifest: the standard check value, streaming
// equal to one shot, digests of multi-chunk files, and the verify errors.
#include "checkpoint/checksum.h"

#include <gtest/gtest.h>

#include <random>

#include "safetensors_test_util.h"

namespace mtrain::checkpoint {
namespace {

using testing::checkpoint_error_of;
using testing::TempDir;

std::span<const std::byte> bytes(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

TEST(Checksum, Crc32CheckValues) {
  EXPECT_EQ(crc32_of(bytes("123456789")), 0xcbf43926u);  // the CRC-32/ISO-HDLC check value
  EXPECT_EQ(crc32_of(bytes("")), 0u);
  EXPECT_EQ(crc32_of(bytes("The quick brown fox jumps over the lazy dog")), 0x414fa339u);
  EXPECT_EQ(crc32_hex(0xcbf43926u), "cbf43926");
  EXPECT_EQ(crc32_hex(0x2au), "0000002a");
}

TEST(Checksum, StreamingEqualsOneShot) {
  std::string data(100000, '\0');
  std::mt19937 gen(7);
  for (char& c : data) c = static_cast<char>(gen());
  const uint32_t whole = crc32_of(bytes(data));
  for (int trial = 0; trial < 20; ++trial) {
    Crc32 c;
    size_t pos = 0;
    while (pos < data.size()) {
      const size_t n = std::min<size_t>(gen() % 5000, data.size() - pos);
      c.update(bytes(std::string_view(data).substr(pos, n)));
      pos += n;
    }
    ASSERT_EQ(c.value(), whole);
  }
}

TEST(Checksum, FileDigestAndChecksummingFile) {
  TempDir tmp;
  PosixFileSystem fs;
  std::string data(static_cast<size_t>(2.5 * (1 << 20)), '\0');  // several read chunks
  std::mt19937 gen(8);
  for (char& c : data) c = static_cast<char>(gen());
  const std::string p = tmp / "blob";
  FileDigest written;
  {
    auto f = fs.open_for_write(p);
    ChecksummingFile cf(*f);
    cf.append(std::string_view(data).substr(0, 1000));
    cf.append(std::string_view(data).substr(1000));
    cf.close();
    written = cf.digest();
  }
  const FileDigest expected{static_cast<int64_t>(data.size()), crc32_of(bytes(data))};
  EXPECT_EQ(written, expected);
  EXPECT_EQ(digest_file(fs, p), expected);
  EXPECT_NO_THROW(verify_file_digest(fs, p, expected));
}

TEST(Checksum, VerifyNamesTheFileAndBothValues) {
  TempDir tmp;
  PosixFileSystem fs;
  const std::string p = tmp / "shard.safetensors";
  testing::put(p, "0123456789");
  const FileDigest good = digest_file(fs, p);

  testing::put(p, "012345678");
  std::string msg = checkpoint_error_of([&] { verify_file_digest(fs, p, good); });
  EXPECT_NE(msg.find(p + ": size 9 bytes, the manifest says 10 (truncated?)"), std::string::npos) << msg;

  testing::put(p, "0123456789X");
  msg = checkpoint_error_of([&] { verify_file_digest(fs, p, good); });
  EXPECT_NE(msg.find(p + ": size 11 bytes, the manifest says 10 |"), std::string::npos) << msg;

  testing::put(p, "0123457789");  // one flipped bit
  msg = checkpoint_error_of([&] { verify_file_digest(fs, p, good); });
  EXPECT_NE(msg.find(p + ": checksum mismatch: crc32 is " + crc32_hex(crc32_of(bytes("0123457789"))) +
                     ", the manifest says " + crc32_hex(good.crc32)),
            std::string::npos)
      << msg;

  msg = checkpoint_error_of([&] { verify_file_digest(fs, tmp / "gone", good); });
  EXPECT_NE(msg.find("checkpoint file missing or unreadable: stat " + (tmp / "gone")), std::string::npos) << msg;
}

}  // namespace
}  // namespace mtrain::checkpoint
