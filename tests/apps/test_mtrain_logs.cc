// What the binary prints, against Megatron-LM's training.py (megatron-compat.md
// §4): the training log line, the validation block between dashed rules, the
// one-time memory line, the initialization/training markers, and mtrain's
// closing "What the trained model answers" block. One short run (4 iterations,
// logged and evaluated every 2) is shared by the tests of this file.
#include <cmath>
#include <set>

#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

constexpr int kIters = 4;
constexpr int kInterval = 2;
constexpr int kGlobalBatch = 16;  // configs/sft_demo.yaml

class Logs : public SuiteTest {
 protected:
  static void SetUpTestSuite() {
    make_suite_dir("logs");
    run_ = new RunResult(run_mtrain(
        {"sft", "configs/sft_demo.yaml", "--train_iters", std::to_string(kIters), "--lr_decay_iters", "2400",
         "--log_interval", std::to_string(kInterval), "--eval_interval", std::to_string(kInterval), "--num_threads",
         "1", "--num_generate_samples", "2", "--max_new_tokens", "8", "--output_dir", (suite_dir() / "out").string()},
        suite_dir()));
  }
  static void TearDownTestSuite() {
    SuiteTest::TearDownTestSuite();
    delete run_;
  }
  void SetUp() override { ASSERT_EQ(run_->exit_code, 0) << run_->describe(); }
  static const RunResult& r() { return *run_; }
  static fs::path out_dir() { return suite_dir() / "out"; }
  static std::vector<std::string> lines() { return lines_of(run_->out); }

  static RunResult* run_;
};
RunResult* Logs::run_ = nullptr;

std::string dashes(size_t n) { return std::string(n, '-'); }

TEST_F(Logs, TrainingLineHasMegatronsExactFormatAndTheLoggedValues) {
  const auto tl = training_lines(r().out);
  const auto rows = train_rows(out_dir());
  ASSERT_EQ(tl.size(), static_cast<size_t>(kIters / kInterval));
  ASSERT_EQ(rows.size(), tl.size());
  // ' [%Y-%m-%d %H:%M:%S] iteration {:8d}/{:8d} | consumed samples: {:12d} | elapsed time per iteration (ms):
  // {:.1f} | learning rate: {:.6E} | global batch size: {:5d} | lm loss: {:.6E} | loss scale: {:.1f} |
  // grad norm: {:.3f} | number of skipped iterations: {:3d} | number of nan iterations: {:3d} |'
  const std::regex shape(
      R"(^ \[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] iteration +\d+/ +\d+ \| consumed samples: +\d+ \| )"
      R"(elapsed time per iteration \(ms\): \d+\.\d \| learning rate: \d\.\d{6}E[-+]\d\d \| )"
      R"(global batch size: +\d+ \| lm loss: \d\.\d{6}E[-+]\d\d \| loss scale: \d+\.\d \| grad norm: \d+\.\d{3} \| )"
      R"(number of skipped iterations: +\d+ \| number of nan iterations: +\d+ \|$)");
  for (size_t i = 0; i < tl.size(); ++i) {
    const std::string& line = tl[i];
    const int it = static_cast<int>((i + 1) * kInterval);
    EXPECT_TRUE(std::regex_match(line, shape)) << line;
    char buf[128];
    std::snprintf(buf, sizeof buf, "] iteration %8d/%8d | consumed samples: %12d |", it, kIters, it * kGlobalBatch);
    EXPECT_TRUE(contains(line, buf)) << "expected '" << buf << "' in\n" << line;
    std::snprintf(buf, sizeof buf, " global batch size: %5d |", kGlobalBatch);
    EXPECT_TRUE(contains(line, buf)) << line;
    EXPECT_TRUE(contains(line, " loss scale: 1.0 |")) << line;
    EXPECT_TRUE(contains(line, " number of skipped iterations:   0 | number of nan iterations:   0 |")) << line;
    // The printed numbers are logging.jsonl's, formatted the Python way.
    EXPECT_EQ(iteration_of(rows[i]), it);
    EXPECT_EQ(field(line, "lm loss"), sci6(rows[i].at("loss").get<double>()));
    EXPECT_EQ(field(line, "learning rate"), sci6(rows[i].at("learning_rate").get<double>()));
    std::snprintf(buf, sizeof buf, "%.3f", rows[i].at("grad_norm").get<double>());
    EXPECT_EQ(field(line, "grad norm"), buf);
  }
  // Warmup 20 iterations to 3e-3: the lr logged after step k is 3e-3 * k / 20.
  EXPECT_EQ(field(tl[0], "learning rate"), "3.000000E-04");
  EXPECT_EQ(field(tl[1], "learning rate"), "6.000000E-04");

  // Megatron's training_log averages the loss over the log interval: this run
  // is the golden run's start (same flags but logging and evaluation), so each
  // logged loss is the mean of the golden per-iteration losses it covers.
  const nlohmann::json golden =
      nlohmann::json::parse(read_text(fs::path(MTRAIN_SOURCE_DIR) / "tests/functional/golden/sft_demo_20.json"))
          .at("lm loss")
          .at("values");
  for (size_t i = 0; i < rows.size(); ++i) {
    double sum = 0;
    for (int it = static_cast<int>(i) * kInterval + 1; it <= static_cast<int>(i + 1) * kInterval; ++it)
      sum += golden.at(std::to_string(it)).get<double>();
    const double want = sum / kInterval;
    EXPECT_NEAR(rows[i].at("loss").get<double>(), want, 1e-4 * want)
        << "logged loss at iteration " << iteration_of(rows[i]);
  }
}

TEST_F(Logs, InitializationAndTrainingMarkersFrameTheTrainingLines) {
  const auto ls = lines();
  auto index_of = [&](const std::string& prefix) -> ptrdiff_t {
    for (size_t i = 0; i < ls.size(); ++i)
      if (ls[i].rfind(prefix, 0) == 0) return static_cast<ptrdiff_t>(i);
    return -1;
  };
  const ptrdiff_t init = index_of("[after megatron is initialized] datetime: ");
  const ptrdiff_t training = index_of("training ...");
  const ptrdiff_t first = index_of(" [");
  const ptrdiff_t done = index_of("[after training is done] datetime: ");
  ASSERT_GE(init, 0) << r().out;
  ASSERT_GE(done, 0) << r().out;
  EXPECT_EQ(training, init + 1);
  EXPECT_GT(first, training);
  EXPECT_GT(done, first);
  EXPECT_TRUE(
      std::regex_match(ls[static_cast<size_t>(init)],
                       std::regex(R"(\[after megatron is initialized\] datetime: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")))
      << ls[static_cast<size_t>(init)];
}

TEST_F(Logs, ValidationBlockAtEachEvalIntervalBetweenRulesOfLineLengthPlusOne) {
  const auto ls = lines();
  const auto evals = eval_rows(out_dir());
  ASSERT_EQ(evals.size(), static_cast<size_t>(kIters / kInterval));
  for (size_t k = 0; k < evals.size(); ++k) {
    const int it = static_cast<int>((k + 1) * kInterval);
    const double loss = evals[k].at("eval_loss").get<double>();
    EXPECT_EQ(evals[k].at("iteration").get<int>(), it);
    EXPECT_GT(loss, 0);
    const std::string want = " validation loss at iteration " + std::to_string(it) + " | lm loss value: " + sci6(loss) +
                             " | lm loss PPL: " + sci6(std::exp(std::min(20.0, loss))) + " | ";
    size_t at = ls.size();
    for (size_t i = 0; i < ls.size(); ++i)
      if (ls[i] == want) at = i;
    ASSERT_LT(at, ls.size()) << "no line\n'" << want << "'\nin\n" << r().out;
    ASSERT_GE(at, 1u);
    ASSERT_LT(at + 1, ls.size());
    EXPECT_EQ(ls[at - 1], dashes(want.size() + 1));
    EXPECT_EQ(ls[at + 1], dashes(want.size() + 1));
    // Printed right after the training line of the same iteration (and the memory line after the first).
    const std::string before = ls[at - 2].rfind("[Rank 0]", 0) == 0 ? ls[at - 3] : ls[at - 2];
    char buf[64];
    std::snprintf(buf, sizeof buf, "] iteration %8d/%8d |", it, kIters);
    EXPECT_TRUE(contains(before, buf)) << before;
  }
  // Evaluation runs without dropout and leaves the weights alone, so more
  // training lowers it here (the model is far from fitting 9 samples).
  EXPECT_LT(evals[1].at("eval_loss").get<double>(), evals[0].at("eval_loss").get<double>());
}

// Megatron's pretrain() evaluates once more after training when there is
// validation data: after '[after training is done]', with the prefix
// f'iteration {iteration} on validation set' (megatron/training/training.py).
TEST_F(Logs, FinalValidationAfterTrainingUsesMegatronsPrefix) {
  const auto ls = lines();
  const std::string prefix = " validation loss at iteration " + std::to_string(kIters) + " on validation set | ";
  size_t at = ls.size(), done = ls.size();
  for (size_t i = 0; i < ls.size(); ++i) {
    if (ls[i].rfind(prefix, 0) == 0) at = i;
    if (ls[i].rfind("[after training is done]", 0) == 0) done = i;
  }
  ASSERT_LT(at, ls.size()) << "no line starting with '" << prefix << "' in\n" << r().out;
  EXPECT_GT(at, done) << "Megatron prints the final validation after '[after training is done]'";
  EXPECT_EQ(ls[at - 1], dashes(ls[at].size() + 1));
  EXPECT_EQ(ls[at + 1], dashes(ls[at].size() + 1));
}

TEST_F(Logs, MemoryLineOnceAfterTheFirstLogLineInPythonFloatFormat) {
  const auto ls = lines();
  std::vector<size_t> at;
  for (size_t i = 0; i < ls.size(); ++i)
    if (contains(ls[i], " memory (MB) | ")) at.push_back(i);
  ASSERT_EQ(at.size(), 1u) << r().out;
  const std::string& line = ls[at[0]];
  // Megatron's report_memory: '{}'.format(bytes / (1024.0 * 1024.0)), i.e. Python's str(float): 144.0, 142.23828125.
  const std::string num = R"((\d+\.\d+(?:e[-+]\d+)?))";
  const std::regex shape("^\\[Rank 0\\] \\(after " + std::to_string(kInterval) +
                         " iterations\\) memory \\(MB\\) \\| "
                         "allocated: " +
                         num + " \\| max allocated: " + num + " \\| reserved: " + num + " \\| max reserved: " + num +
                         "$");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(line, m, shape)) << line;
  const double allocated = std::stod(m[1]), max_allocated = std::stod(m[2]), reserved = std::stod(m[3]),
               max_reserved = std::stod(m[4]);
  EXPECT_LE(allocated, max_allocated);
  EXPECT_LE(reserved, max_reserved);
  EXPECT_LE(allocated, reserved);
  EXPECT_LE(max_allocated, max_reserved);
  // fp32 weights, gradients and Adam's two moments of the 3,428,608-parameter demo model alone are 52.3 MiB.
  EXPECT_GE(allocated, 4 * 3428608 * 4.0 / (1 << 20));
  EXPECT_LT(max_reserved, 1024.0) << "the demo model needs well under 1 GiB";
  // Right after the first training line.
  ASSERT_GE(at[0], 1u);
  char buf[64];
  std::snprintf(buf, sizeof buf, "] iteration %8d/%8d |", kInterval, kIters);
  EXPECT_TRUE(contains(ls[at[0] - 1], buf)) << ls[at[0] - 1];
}

// The prompts and references shown must be the dataset's own.
TEST_F(Logs, GenerationBlockShowsPromptReferenceAndAnswerOfTwoSamples) {
  const std::set<std::string> texts = [] {
    std::set<std::string> s;
    for (const auto& j : read_jsonl(fs::path(MTRAIN_SOURCE_DIR) / "configs/demo/sft.jsonl")) {
      if (j.contains("instruction")) {
        const std::string in = j.value("input", "");
        s.insert(j.at("instruction").get<std::string>() + (in.empty() ? "" : "\n" + in));
        s.insert(j.at("output").get<std::string>());
      }
      if (j.contains("messages"))
        for (const auto& msg : j.at("messages")) s.insert(msg.at("content").get<std::string>());
    }
    return s;
  }();
  const std::string header = "\nWhat the trained model answers (greedy decoding):\n";
  const size_t h = r().out.find(header);
  ASSERT_NE(h, std::string::npos) << r().out;
  // After the header: blocks "  prompt:    P\n  reference: R\n  mtrain:    A\n\n"; P may span lines,
  // continuation lines indented under the first.
  const std::regex block(R"(  prompt:    ([\s\S]*?)\n  reference: ([^\n]*)\n  mtrain:    ([\s\S]*?)\n\n)");
  const std::string tail = r().out.substr(h + header.size());
  int n = 0;
  size_t consumed = 0;
  for (auto it = std::sregex_iterator(tail.begin(), tail.end(), block); it != std::sregex_iterator(); ++it, ++n) {
    const std::smatch& m = *it;
    EXPECT_EQ(static_cast<size_t>(m.position(0)), consumed) << "unexpected text between the blocks";
    consumed = static_cast<size_t>(m.position(0) + m.length(0));
    const std::string prompt = std::regex_replace(m[1].str(), std::regex("\n             "), "\n");
    EXPECT_TRUE(texts.count(prompt)) << "prompt not in configs/demo/sft.jsonl: '" << prompt << "'";
    EXPECT_TRUE(texts.count(m[2].str())) << "reference not in configs/demo/sft.jsonl: '" << m[2] << "'";
  }
  EXPECT_EQ(n, 2) << tail;
}

}  // namespace
}  // namespace mtrain::functional
