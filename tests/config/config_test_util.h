// Helpers for the lib/config tests: argv building, temporary YAML files and
// exception-message assertions.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "common/errors.h"
#include "config/cli.h"

namespace mtrain::config::testing {

// parse_command_line({"sft", "--lr", "1"}) with argv[0] = "mtrain".
inline Invocation parse(const std::vector<std::string>& args, const ParseOptions& options = {}) {
  std::vector<const char*> argv = {"mtrain"};
  for (const auto& a : args) argv.push_back(a.c_str());
  return parse_command_line(static_cast<int>(argv.size()), argv.data(), options);
}

// A valid training command line plus `extra`: the demo preset and 10 iterations.
inline std::vector<std::string> sft_with(std::vector<std::string> extra) {
  std::vector<std::string> args = {"sft", "--model_preset", "demo", "--train_iters", "10"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

inline Args parse_sft(std::vector<std::string> extra) { return parse(sft_with(std::move(extra))).args; }

// A fresh directory under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    auto base = std::filesystem::temp_directory_path() /
                ("mtrain_config_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    std::filesystem::remove_all(base);
    std::filesystem::create_directories(base);
    path_ = base.string();
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Writes `text` to <dir>/<name> and returns the full path.
  std::string write(const std::string& name, const std::string& text) const {
    std::string p = path_ + "/" + name;
    std::filesystem::create_directories(std::filesystem::path(p).parent_path());
    std::ofstream(p) << text;
    return p;
  }
  const std::string& path() const { return path_; }

 private:
  static int& counter() {
    static int c = 0;
    return c;
  }
  std::string path_;
};

// Runs `fn`, expects an mtrain::Error with `code`, and returns it (one with
// an empty message and hint when nothing was thrown).
inline Error error_thrown(const std::function<void()>& fn, ExitCode code) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.code()), static_cast<int>(code)) << e.what();
    return e;
  }
  ADD_FAILURE() << "expected an mtrain::Error (" << exit_code_name(code) << "), nothing was thrown";
  return Error(code, "");
}

// The message of the error `fn` throws (see error_thrown).
inline std::string error_of(const std::function<void()>& fn, ExitCode code) { return error_thrown(fn, code).what(); }

inline std::string usage_error(const std::vector<std::string>& args) {
  return error_of([&] { parse(args); }, ExitCode::kUsage);
}
inline std::string config_error(const std::vector<std::string>& args) {
  return error_of([&] { parse(args); }, ExitCode::kConfig);
}

}  // namespace mtrain::config::testing
