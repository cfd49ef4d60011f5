// A safetensors file read by the format's definition, independently of
// mtrain's reader: 8-byte little-endian header length, the JSON header, the
// data section (the PEFT export tests check names, shapes and values with it).
#pragma once

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mtrain::functional {

// Bytes of a file.
inline std::string file_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

struct RawSafetensors {
  nlohmann::json header;
  std::string data;
  std::vector<float> f32(const std::string& name) const {
    const nlohmann::json& t = header.at(name);
    const size_t b = t["data_offsets"][0], e = t["data_offsets"][1];
    std::vector<float> v((e - b) / 4);
    std::memcpy(v.data(), data.data() + b, e - b);
    return v;
  }
};

inline RawSafetensors read_raw(const std::filesystem::path& p) {
  const std::string bytes = file_bytes(p);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  return {nlohmann::json::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
}

}  // namespace mtrain::functional
