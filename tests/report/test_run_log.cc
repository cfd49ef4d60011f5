// Reading logging.jsonl as the logger writes it (observe/logger.cc): training
// and validation rows, a truncated last line, missing keys, resumed runs;
// and the errors for a directory that is not a run.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/errors.h"
#include "report/report.h"
#include "report/run_log.h"

namespace mtrain::report {
namespace {

namespace fs = std::filesystem;

const char* kRow5 =
    R"({"loss":6.5,"grad_norm":2.25,"learning_rate":0.001,"iteration":"5/20","loss_scale":1.0,)"
    R"("skipped_iterations":0,"nan_iterations":0,"elapsed_time_per_iteration_ms":101.5,"tokens_per_second":3000.0,)"
    R"("memory/weights":1048576,"memory/activations":0})";
const char* kRow10 = R"({"loss":3.25,"grad_norm":null,"learning_rate":0.002,"iteration":"10/20","loss_scale":65536.0,)"
                     R"("skipped_iterations":2,"nan_iterations":1})";
const char* kEval10 = R"({"eval_loss":3.5,"eval_ppl":33.1,"iteration":10,"end_of_training":false})";

RunLog parse(const std::string& text) {
  std::istringstream in(text);
  RunLog log;
  parse_logging_jsonl(in, "logging.jsonl", log);
  return log;
}

TEST(RunLog, ReadsTrainingAndValidationRows) {
  const RunLog log = parse(std::string(kRow5) + "\n" + kRow10 + "\n" + kEval10 + "\n");
  ASSERT_EQ(log.train.size(), 2u);
  const TrainRow& a = log.train[0];
  EXPECT_EQ(a.iteration, 5);
  EXPECT_EQ(a.train_iters, 20);
  EXPECT_EQ(a.loss, 6.5);
  EXPECT_EQ(a.grad_norm, 2.25);
  EXPECT_EQ(a.learning_rate, 0.001);
  EXPECT_EQ(a.iteration_ms, 101.5);
  EXPECT_EQ(a.tokens_per_second, 3000.0);
  ASSERT_EQ(a.memory.size(), 2u);
  EXPECT_EQ(a.memory[0], (std::pair<std::string, double>("activations", 0)));  // nlohmann keeps keys sorted
  EXPECT_EQ(a.memory[1], (std::pair<std::string, double>("weights", 1048576)));
  const TrainRow& b = log.train[1];
  EXPECT_TRUE(std::isnan(b.grad_norm));     // null: no grad norm that step
  EXPECT_TRUE(std::isnan(b.iteration_ms));  // absent
  EXPECT_EQ(b.loss_scale, 65536.0);
  EXPECT_EQ(b.skipped, 2);
  EXPECT_EQ(b.nans, 1);
  ASSERT_EQ(log.eval.size(), 1u);
  EXPECT_EQ(log.eval[0].iteration, 10);
  EXPECT_EQ(log.eval[0].loss, 3.5);
  EXPECT_EQ(log.truncated_lines, 0);
  EXPECT_TRUE(log.warnings.empty());
}

TEST(RunLog, AnIntervalOfSkippedIterationsHasNoLoss) {
  const RunLog log = parse(R"({"loss":0.0,"iteration":"5/20","skipped_iterations":5})"
                           "\n"
                           R"({"loss":0.0,"iteration":"10/20","skipped_iterations":0})"
                           "\n");
  ASSERT_EQ(log.train.size(), 2u);
  EXPECT_TRUE(std::isnan(log.train[0].loss));
  EXPECT_EQ(log.train[1].loss, 0.0);
}

TEST(RunLog, ATruncatedLastLineIsSkippedAndEarlierRowsKept) {
  const std::string row10(kRow10);
  const RunLog log = parse(std::string(kRow5) + "\n" + row10.substr(0, row10.size() / 2));
  ASSERT_EQ(log.train.size(), 1u);
  EXPECT_EQ(log.train[0].iteration, 5);
  EXPECT_EQ(log.truncated_lines, 1);
  EXPECT_TRUE(log.warnings.empty());
}

TEST(RunLog, ACompleteLastRowWithoutItsNewlineCounts) {
  const RunLog log = parse(std::string(kRow5) + "\n" + kRow10);
  EXPECT_EQ(log.train.size(), 2u);
  EXPECT_EQ(log.truncated_lines, 0);
}

TEST(RunLog, ABrokenLineInsideTheFileIsSkippedWithItsLineNumber) {
  const RunLog log = parse(std::string(kRow5) + "\n{\"loss\": 1.0, \"itera\n" + kRow10 + "\n");
  EXPECT_EQ(log.train.size(), 2u);
  ASSERT_EQ(log.warnings.size(), 1u);
  EXPECT_EQ(log.warnings[0], "logging.jsonl:2: not a JSON object, skipped");
}

TEST(RunLog, AResumedRunReplacesTheRowsItRepeats) {
  // Logged to 15 (validation at 10), killed, resumed from the checkpoint at 5.
  const std::string again10 = R"({"loss":3.0,"learning_rate":0.002,"iteration":"10/20"})";
  const std::string row15 = R"({"loss":2.0,"learning_rate":0.002,"iteration":"15/20"})";
  const RunLog log =
      parse(std::string(kRow5) + "\n" + kRow10 + "\n" + kEval10 + "\n" + row15 + "\n" + again10 + "\n" + row15 + "\n");
  ASSERT_EQ(log.train.size(), 3u);
  EXPECT_EQ(log.train[1].iteration, 10);
  EXPECT_EQ(log.train[1].loss, 3.0);  // the resumed run's
  EXPECT_EQ(log.train[2].iteration, 15);
  EXPECT_TRUE(log.eval.empty());  // the validation at 10 belonged to the replaced training
}

TEST(RunLog, ArgText) {
  const nlohmann::json args = nlohmann::json::parse(R"({"lr":0.001,"bf16":true,"dataset":["a.jsonl","b.jsonl"],
    "model":null,"command":"sft"})");
  EXPECT_EQ(arg_text(args, "lr"), "0.001");
  EXPECT_EQ(arg_text(args, "bf16"), "true");
  EXPECT_EQ(arg_text(args, "dataset"), "a.jsonl b.jsonl");
  EXPECT_EQ(arg_text(args, "model"), "");
  EXPECT_EQ(arg_text(args, "absent"), "");
  EXPECT_EQ(arg_text(args, "command"), "sft");
}

class RunDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mtrain_run_log_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  fs::path dir_;
};

// The exception's exit code and message.
template <typename F>
std::pair<ExitCode, std::string> failure(F f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  return {ExitCode::kOk, ""};
}

TEST_F(RunDir, ReadsTheRunAndItsArguments) {
  write("logging.jsonl", std::string(kRow5) + "\n");
  write("args.json", R"({"clip_grad": 1.0, "tensor_model_parallel_size": 2})");
  const RunLog log = read_run_dir(dir_.string());
  EXPECT_EQ(log.train.size(), 1u);
  EXPECT_EQ(log.label, dir_.filename().string());
  EXPECT_EQ(arg_text(log.args, "tensor_model_parallel_size"), "2");
}

TEST_F(RunDir, NotARunIsRefusedNamingThePath) {
  const auto missing = failure([&] { read_run_dir((dir_ / "nope").string()); });
  EXPECT_EQ(missing.first, ExitCode::kUsage);
  EXPECT_NE(missing.second.find((dir_ / "nope").string() + ": no such directory"), std::string::npos);
  write("file.txt", "x");
  EXPECT_EQ(failure([&] { read_run_dir((dir_ / "file.txt").string()); }).first, ExitCode::kUsage);
  const auto no_log = failure([&] { read_run_dir(dir_.string()); });
  EXPECT_EQ(no_log.first, ExitCode::kData);
  EXPECT_NE(no_log.second.find(dir_.string() + " is not a run directory: it has no logging.jsonl"), std::string::npos)
      << no_log.second;
  write("logging.jsonl", R"({"eval_loss": 1.0, "iteration": 5})"
                         "\n");
  const auto no_rows = failure([&] { read_run_dir(dir_.string()); });
  EXPECT_EQ(no_rows.first, ExitCode::kData);
  EXPECT_NE(no_rows.second.find("logging.jsonl holds no logged training iteration yet"), std::string::npos)
      << no_rows.second;
}

TEST_F(RunDir, RunsOfTheSameNameAreLabelledByTheirPath) {
  for (const char* run : {"tp1/out", "tp2/out"}) {
    fs::create_directories(dir_ / run);
    std::ofstream(dir_ / run / "logging.jsonl") << kRow5 << "\n";
  }
  ReportOptions o = parse_report_args(
      {(dir_ / "tp1/out").string(), "--compare", (dir_ / "tp2/out").string(), "--out", (dir_ / "cmp.html").string()});
  const ReportFiles files = write_report(o);
  std::ifstream in(files.html);
  const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(html.find("data-label=\"" + (dir_ / "tp1/out").string() + " training\""), std::string::npos);
  EXPECT_NE(html.find("data-label=\"" + (dir_ / "tp2/out").string() + " training\""), std::string::npos);
  EXPECT_TRUE(fs::exists(dir_ / "report" / "loss.svg"));
}

}  // namespace
}  // namespace mtrain::report
