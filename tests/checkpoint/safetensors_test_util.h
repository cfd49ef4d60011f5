// Helpers for the safetensors tests: hand-assembled files (8-byte length +
// header text + data), the CheckpointError text of a call, random values.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../common/fs_test_util.h"
#include "common/errors.h"

namespace mtrain::checkpoint::testing {

using mtrain::testing::put;
using mtrain::testing::slurp;
using mtrain::testing::TempDir;

// The 8-byte little-endian length, written out byte by byte (independent of the writer).
inline std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

inline std::string file_bytes(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

// "message | hint" of the CheckpointError f throws; fails the test when it throws nothing.
inline std::string checkpoint_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const CheckpointError& e) {
    return std::string(e.what()) + " | " + e.hint();
  }
  ADD_FAILURE() << "no CheckpointError thrown";
  return "";
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

template <typename T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span(v));
}

}  // namespace mtrain::checkpoint::testing
