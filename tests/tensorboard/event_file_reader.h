// The tests' own reader of TensorBoard event files, independent of
// lib/tensorboard's writer: it parses the TFRecord framing itself, checks both
// masked CRC-32Cs with a bitwise CRC-32C written from its definition
// (reflected polynomial 0x82F63B78), and decodes each record with protobuf
// into tensorflow.Event. Like TensorBoard's loader it stops, without failing,
// at a record cut short by a killed writer; a record whose CRC is wrong is an
// error.
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "tensorboard_event.pb.h"

namespace mtrain::tbtest {

inline uint32_t crc32c_bitwise(std::string_view s) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : s) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return ~c;
}

inline uint32_t masked(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xA282EAD8u; }

inline uint64_t le(std::string_view s) {
  uint64_t v = 0;
  for (size_t i = s.size(); i-- > 0;) v = (v << 8) | static_cast<unsigned char>(s[i]);
  return v;
}

struct ReadResult {
  std::vector<tensorflow::Event> events;
  bool truncated = false;  // the file ends inside a record
  std::string error;       // a bad CRC or an undecodable record ("" if none)
};

inline ReadResult read_event_bytes(const std::string& bytes) {
  ReadResult r;
  size_t pos = 0;
  while (pos < bytes.size()) {
    if (bytes.size() - pos < 12) {  // cut inside the header
      r.truncated = true;
      return r;
    }
    const std::string_view head(bytes.data() + pos, 8);
    if (le(std::string_view(bytes.data() + pos + 8, 4)) != masked(crc32c_bitwise(head))) {
      r.error = "length CRC mismatch at byte " + std::to_string(pos);
      return r;
    }
    const uint64_t n = le(head);
    if (bytes.size() - pos - 12 < n + 4) {  // cut inside the data or its CRC
      r.truncated = true;
      return r;
    }
    const std::string_view data(bytes.data() + pos + 12, n);
    if (le(std::string_view(bytes.data() + pos + 12 + n, 4)) != masked(crc32c_bitwise(data))) {
      r.error = "data CRC mismatch at byte " + std::to_string(pos);
      return r;
    }
    tensorflow::Event ev;
    if (!ev.ParseFromArray(data.data(), static_cast<int>(n))) {
      r.error = "undecodable Event at byte " + std::to_string(pos);
      return r;
    }
    r.events.push_back(std::move(ev));
    pos += 16 + n;
  }
  return r;
}

inline ReadResult read_event_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return read_event_bytes(s.str());
}

// The event files in `dir`, oldest name first.
inline std::vector<std::filesystem::path> event_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// One scalar as read back.
struct Point {
  std::string tag;
  int64_t step;
  float value;
  double wall_time;
};

inline std::vector<Point> scalars(const ReadResult& r) {
  std::vector<Point> out;
  for (const auto& ev : r.events)
    if (ev.has_summary())
      for (const auto& v : ev.summary().value()) out.push_back({v.tag(), ev.step(), v.simple_value(), ev.wall_time()});
  return out;
}

// A fresh directory under the temporary directory, removed with its contents.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "mtrain_tb_XXXXXX").string();
    path = mkdtemp(t.data());
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

}  // namespace mtrain::tbtest
