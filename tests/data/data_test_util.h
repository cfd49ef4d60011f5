// Helpers shared by the lib/data tests: paths of fixtures and temporary files.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/errors.h"

namespace mtrain::data::testing {

inline std::string source_path(const std::string& relative) { return std::string(MTRAIN_SOURCE_DIR) + "/" + relative; }

// Writes `content` to a fresh file named after the running test; returns its path.
inline std::string write_temp_file(const std::string& name, const std::string& content) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const auto dir = std::filesystem::path(::testing::TempDir()) / "mtrain_data_tests" /
                   (std::string(info->test_suite_name()) + "." + info->name());
  std::filesystem::create_directories(dir);
  const auto path = (dir / name).string();
  std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
  return path;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs `fn`, expects a DataError and returns its message.
template <typename Fn>
std::string data_error_message(Fn&& fn) {
  try {
    fn();
  } catch (const DataError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a DataError";
  return "";
}

}  // namespace mtrain::data::testing
