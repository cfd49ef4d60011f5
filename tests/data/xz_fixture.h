// Decompresses the checked-in .xz tokenizer fixtures (liblzma) into the test
// temporary directory, once per process.
#pragma once

#include <gtest/gtest.h>
#include <lzma.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

namespace mtrain::data::testing {

inline std::string xz_decompress(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  const std::string packed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  lzma_stream stream = LZMA_STREAM_INIT;
  if (lzma_stream_decoder(&stream, UINT64_MAX, 0) != LZMA_OK) throw std::runtime_error("lzma_stream_decoder failed");
  stream.next_in = reinterpret_cast<const uint8_t*>(packed.data());
  stream.avail_in = packed.size();
  std::string out;
  char buffer[1 << 16];
  lzma_ret rc = LZMA_OK;
  while (rc == LZMA_OK) {
    stream.next_out = reinterpret_cast<uint8_t*>(buffer);
    stream.avail_out = sizeof(buffer);
    rc = lzma_code(&stream, LZMA_FINISH);
    out.append(buffer, sizeof(buffer) - stream.avail_out);
  }
  lzma_end(&stream);
  if (rc != LZMA_STREAM_END)
    throw std::runtime_error(path + ": corrupt .xz data (lzma error " + std::to_string(rc) + ")");
  return out;
}

// Decompresses every NAME.xz of `fixture_dir` into a directory shared by the
// test processes; returns it. Each file is written under a name of this
// process and renamed into place, so a test in another process (ctest -j) never
// reads a half-written file.
inline std::string unpack_xz_dir(const std::string& fixture_dir, const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "mtrain_xz_fixtures" / name;
  std::filesystem::create_directories(dir);
  for (const auto& entry : std::filesystem::directory_iterator(fixture_dir)) {
    if (entry.path().extension() != ".xz") continue;
    const auto target = dir / entry.path().stem();
    const auto partial = dir / (entry.path().stem().string() + ".partial." + std::to_string(::getpid()));
    std::ofstream(partial, std::ios::binary | std::ios::trunc) << xz_decompress(entry.path().string());
    std::filesystem::rename(partial, target);
  }
  return dir.string();
}

}  // namespace mtrain::data::testing
