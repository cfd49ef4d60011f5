// Failure classes through the binary (reliability.md B7 F5, F7, F9): each ends
// with its own exit code (lib/common/errors.h) and a message that names the
// thing that is wrong - never a crash, a hang, or silent training on NaN.
#include <cmath>
#include <map>

#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

constexpr int kOutOfMemory = 6;
constexpr int kNonFinite = 7;
constexpr int kData = 4;
constexpr int kConfig = 3;

// --- Out of memory on the simulated NPU -------------------------------------

class Oom : public MtrainTest {
 protected:
  // Breakdown lines "    <category>   <x.xx> MiB" after "Allocated by category:".
  // Rows under `header` up to the next header ("Allocated by category:" is
  // what is on the device, "This request:" what failed to fit).
  static std::vector<std::pair<std::string, double>> breakdown(const std::string& err,
                                                               const std::string& header = "Allocated by category:") {
    std::vector<std::pair<std::string, double>> rows;
    const size_t at = err.find(header);
    if (at == std::string::npos) return rows;
    const size_t end = header == "Allocated by category:" ? err.find("This request:", at) : std::string::npos;
    const std::regex line(R"(^ +([a-z][a-z _()-]*?) +(\d+\.\d\d) MiB.*$)");
    for (const std::string& l : lines_of(err.substr(at, end == std::string::npos ? std::string::npos : end - at))) {
      std::smatch m;
      if (std::regex_match(l, m, line)) rows.emplace_back(m[1], std::stod(m[2]));
    }
    return rows;
  }
};

// 4 layers at hidden 65536 are ~52e9 parameters (~195 GiB of fp32 weights)
// against 64 GiB of HBM: a real run checks the budget shape-only first and
// refuses before training, without touching host memory (the child runs
// under a 4 GiB address cap), with the dry run's verdict.
TEST_F(Oom, HiddenSize65536ExitsWithOutOfMemoryBeforeTraining) {
  RunOptions fast;
  fast.timeout_seconds = 30;
  const RunResult r = run({"sft", "configs/sft_demo.yaml", "--hidden_size", "65536", "--num_threads", "1",
                           "--output_dir", (tmp_ / "out").string()},
                          "run", fast);
  ASSERT_FALSE(r.timed_out) << r.describe();
  EXPECT_EQ(r.signal, 0) << r.describe();
  EXPECT_EQ(r.exit_code, kOutOfMemory) << r.describe();
  EXPECT_TRUE(contains(r.err, "mtrain: error: the plan does not fit: pipeline stage 0 (rank 0) needs ")) << r.err;
  EXPECT_TRUE(contains(r.err, "capacity 64.00 GiB")) << r.err;
  EXPECT_TRUE(contains(r.err, "--dry_run of the same flags shows every part")) << r.err;
  EXPECT_TRUE(contains(r.err, "  hint: ")) << r.err;
  EXPECT_FALSE(contains(r.out, "training ...")) << r.out;
  EXPECT_TRUE(training_lines(r.out).empty());

  // The largest part is Adam's m and v (the demo trains in fp32: no master
  // copy): 2 x 4 B per parameter. Per layer QKV (h x 2h, GQA 2 of 4 heads) +
  // bias, projection h x h, SwiGLU 3 x 688 x h, two norms; plus embedding and
  // output layer (1024 x h each) and the final norm.
  const double h = 65536, ffn = 688, vocab = 1024, layers = 4;
  const double per_layer = h * 2 * h + 2 * h + h * h + 3 * ffn * h + 2 * h;
  const double params = layers * per_layer + 2 * vocab * h + h;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex(R"(the largest part is optimizer states \((\d+\.\d\d) GiB)")))
      << r.err;
  EXPECT_NEAR(std::stod(m[1]), 8 * params / (1LL << 30), 0.01);
}

// The breakdown that makes the verdict actionable: the dry run of the same
// flags lists every part, the weights (4 B per parameter) among them.
TEST_F(Oom, TheDryRunOfTheRefusedFlagsShowsEveryPart) {
  const RunResult r = run({"sft", "configs/sft_demo.yaml", "--hidden_size", "65536", "--num_threads", "1",
                           "--output_dir", (tmp_ / "out").string(), "--dry_run"});
  ASSERT_EQ(r.exit_code, kOutOfMemory) << r.describe();
  const double h = 65536, ffn = 688, vocab = 1024, layers = 4;
  const double params = layers * (h * 2 * h + 2 * h + h * h + 3 * ffn * h + 2 * h) + 2 * vocab * h + h;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(\n  weights +(\d+\.\d\d) GiB\n)"))) << r.out;
  EXPECT_NEAR(std::stod(m[1]), 4 * params / (1LL << 30), 0.01);
  EXPECT_TRUE(contains(r.out, "DOES NOT FIT")) << r.out;
}

// The 64 MiB test device holds the demo's weights and gradients but not its
// activations at micro-batch 8: the real run is refused before training with
// a hint that is true: with it, the same run trains.
TEST_F(Oom, TheHintOfARefusedRunTrains) {
  const std::vector<std::string> job = {"sft",
                                        "configs/sft_demo.yaml",
                                        "--device_profile",
                                        "tiny_test",
                                        "--train_iters",
                                        "2",
                                        "--lr_warmup_iters",
                                        "0",
                                        "--num_threads",
                                        "1",
                                        "--output_dir",
                                        (tmp_ / "out").string()};
  const RunResult r = run(job);
  ASSERT_EQ(r.exit_code, kOutOfMemory) << r.describe();
  EXPECT_TRUE(contains(r.err, "mtrain: error: the plan does not fit: pipeline stage 0 (rank 0) needs ")) << r.err;
  EXPECT_TRUE(contains(r.err, "of tiny_test HBM, capacity 0.06 GiB")) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex(R"(fit\): (--micro_batch_size) (\d+) \(peak)"))) << r.err;
  std::vector<std::string> fixed = job;
  fixed.insert(fixed.end(), {m[1].str(), m[2].str()});
  const RunResult ok = run(fixed, "fixed");
  EXPECT_EQ(ok.exit_code, 0) << ok.describe();
  EXPECT_FALSE(training_lines(ok.out).empty()) << ok.out;
}

// The device fits (64 GiB) but the host does not: every simulated tensor is
// real memory. Under an address-space limit the allocation fails and mtrain
// must say so with the OOM exit code, not crash.
TEST_F(Oom, HostAllocationFailureExitsWithOutOfMemoryNotACrash) {
  RunOptions small;
  small.address_space_bytes = uint64_t{2} << 30;
  const RunResult r = run({"sft", "configs/sft_demo.yaml", "--hidden_size", "4096", "--train_iters", "2",
                           "--lr_warmup_iters", "0", "--num_threads", "1", "--output_dir", (tmp_ / "out").string()},
                          "run", small);
  EXPECT_EQ(r.signal, 0) << r.describe();
  EXPECT_EQ(r.exit_code, kOutOfMemory) << r.describe();
  EXPECT_TRUE(contains(r.err, "host out of memory: ")) << r.err;
  EXPECT_TRUE(training_lines(r.out).empty());
}

// --- NaN / Inf --------------------------------------------------------------

using NonFinite = MtrainTest;

// lr 1e30 without clipping: iteration 1 steps with lr 0 (warmup), iteration 2
// with 1.5e28, which destroys the weights, so the loss of iteration 3 is NaN.
TEST_F(NonFinite, DivergedLossAbortsWithExit7NamingTheIteration) {
  const RunResult r = run(concat(demo_sft_args(10, tmp_ / "out"), {"--lr", "1e30", "--clip_grad", "0"}));
  EXPECT_EQ(r.exit_code, kNonFinite) << r.describe();
  EXPECT_TRUE(contains(r.err, "mtrain: error: iteration 3: the loss is not finite")) << r.err;
  EXPECT_TRUE(contains(r.err, "stopped before the optimizer step, so the weights are those after iteration 2"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "--on_nonfinite skip")) << "the hint should name the way to skip instead\n" << r.err;
  EXPECT_EQ(training_lines(r.out).size(), 2u) << r.out;
  EXPECT_FALSE(contains(r.out, "[after training is done]"));
  const auto rows = train_rows(tmp_ / "out");
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) EXPECT_TRUE(std::isfinite(row.at("loss").get<double>()));
}

// Initial weights with std 1e30: the logits saturate (the loss is finite) but
// the gradients overflow, so the gradient norm is caught at iteration 1.
TEST_F(NonFinite, InfiniteGradNormAbortsAtIteration1) {
  const RunResult r = run(concat(demo_sft_args(10, tmp_ / "out"), {"--init_method_std", "1e30"}));
  EXPECT_EQ(r.exit_code, kNonFinite) << r.describe();
  EXPECT_TRUE(contains(r.err, "mtrain: error: iteration 1: the gradient norm is not finite")) << r.err;
  EXPECT_TRUE(training_lines(r.out).empty()) << r.out;
}

// --on_nonfinite skip: each non-finite step is skipped (weights untouched, lr
// schedule not advanced) and counted as skipped and nan; after
// --max_consecutive_nonfinite_skips such steps in a row the next one aborts.
TEST_F(NonFinite, SkipCountsSkippedAndNanIterationsThenStopsAfterTheCap) {
  const std::vector<std::string> skip = {
      "--init_method_std", "1e30", "--on_nonfinite", "skip", "--max_consecutive_nonfinite_skips", "2"};
  const RunResult r = run(concat(demo_sft_args(10, tmp_ / "a"), skip), "a");
  EXPECT_EQ(r.exit_code, kNonFinite) << r.describe();
  EXPECT_TRUE(contains(r.err, "mtrain: error: iteration 3: ")) << r.err;
  EXPECT_TRUE(contains(r.err, "consecutive")) << r.err;
  const auto lines = training_lines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  for (const std::string& line : lines) {
    EXPECT_EQ(field(line, "number of skipped iterations"), "  1") << line;
    EXPECT_EQ(field(line, "number of nan iterations"), "  1") << line;
    EXPECT_EQ(field(line, "lm loss"), "") << line;
    EXPECT_EQ(field(line, "learning rate"), "0.000000E+00") << line;
  }
  const auto rows = train_rows(tmp_ / "a");
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) {
    EXPECT_EQ(row.at("skipped_iterations"), 1);
    EXPECT_EQ(row.at("nan_iterations"), 1);
  }

  // Counted per log interval, like Megatron's training_log.
  const RunResult b = run(concat(concat(demo_sft_args(10, tmp_ / "b"), skip), {"--log_interval", "2"}), "b");
  EXPECT_EQ(b.exit_code, kNonFinite) << b.describe();
  const auto blines = training_lines(b.out);
  ASSERT_EQ(blines.size(), 1u) << b.out;
  EXPECT_TRUE(contains(blines[0], "] iteration        2/      10 |")) << blines[0];
  EXPECT_EQ(field(blines[0], "number of skipped iterations"), "  2") << blines[0];
  EXPECT_EQ(field(blines[0], "number of nan iterations"), "  2") << blines[0];
}

// --- Data and tokenizer -----------------------------------------------------

class Data : public MtrainTest {
 protected:
  RunResult run_with(const std::vector<std::string>& flags, const std::string& tag = "run") {
    return run(concat(concat(demo_sft_args(2, tmp_ / (tag + "_out")), {"--lr_warmup_iters", "0"}), flags), tag);
  }
  // The first n lines of the shipped dataset.
  static std::vector<std::string> demo_lines(size_t n) {
    auto all = lines_of(read_text(fs::path(MTRAIN_SOURCE_DIR) / "configs/demo/sft.jsonl"));
    all.resize(n);
    return all;
  }
};

TEST_F(Data, MissingDatasetExits4NamingThePath) {
  const std::string path = (tmp_ / "nope.jsonl").string();
  const RunResult r = run_with({"--dataset", path});
  EXPECT_EQ(r.exit_code, kData) << r.describe();
  EXPECT_TRUE(contains(r.err, "cannot open dataset file '" + path + "': No such file or directory")) << r.err;

  const RunResult pt = run({"pt", "--model_preset", "demo", "--tokenizer", "configs/demo/tokenizer.json", "--dataset",
                            path, "--train_iters", "2", "--output_dir", (tmp_ / "pt").string()},
                           "pt");
  EXPECT_EQ(pt.exit_code, kData) << pt.describe();
  EXPECT_TRUE(contains(pt.err, path)) << pt.err;
}

TEST_F(Data, MalformedJsonlLineExits4WithFileAndLine) {
  auto lines = demo_lines(5);
  lines[3] = R"({"instruction": "Say hi.", "output": )";  // line 4: cut short
  const fs::path p = tmp_ / "broken.jsonl";
  write_text(p, join(lines, "\n") + "\n");
  const RunResult r = run_with({"--dataset", p.string()});
  EXPECT_EQ(r.exit_code, kData) << r.describe();
  EXPECT_TRUE(contains(r.err, "mtrain: error: " + p.string() + ":4:")) << r.err;
  EXPECT_TRUE(contains(r.err, "invalid JSON")) << r.err;
  EXPECT_FALSE(contains(r.out, "training ...")) << r.out;
}

TEST_F(Data, UnknownSampleFormatExits4WithFileAndLine) {
  auto lines = demo_lines(3);
  lines[1] = R"({"question": "Say hi.", "answer": "hi"})";
  const fs::path p = tmp_ / "format.jsonl";
  write_text(p, join(lines, "\n") + "\n");
  const RunResult r = run_with({"--dataset", p.string()});
  EXPECT_EQ(r.exit_code, kData) << r.describe();
  EXPECT_TRUE(contains(r.err, p.string() + ":2: unknown sample format with keys [answer, question]")) << r.err;
}

TEST_F(Data, EmptyDatasetExits4) {
  const fs::path p = tmp_ / "empty.jsonl";
  write_text(p, "");
  const RunResult r = run_with({"--dataset", p.string()});
  EXPECT_EQ(r.exit_code, kData) << r.describe();
  EXPECT_TRUE(contains(r.err, p.string() + ": the dataset has no samples")) << r.err;
}

TEST_F(Data, MissingOrBrokenTokenizerIsAClearError) {
  const std::string path = (tmp_ / "nope.json").string();
  const RunResult missing = run_with({"--tokenizer", path}, "missing");
  EXPECT_EQ(missing.exit_code, kData) << missing.describe();
  EXPECT_TRUE(contains(missing.err, "cannot open tokenizer file '" + path + "'")) << missing.err;

  const fs::path garbage = tmp_ / "garbage.json";
  write_text(garbage, "not json\n");
  const RunResult broken = run_with({"--tokenizer", garbage.string()}, "broken");
  EXPECT_EQ(broken.exit_code, kData) << broken.describe();
  EXPECT_TRUE(contains(broken.err, garbage.string() + ": invalid JSON")) << broken.err;

  // No --tokenizer at all (the demo YAML sets one; a bare command does not).
  const RunResult none = run({"sft", "--model_preset", "demo", "--dataset", "configs/demo/sft.jsonl", "--train_iters",
                              "2", "--output_dir", (tmp_ / "none").string()},
                             "none");
  EXPECT_EQ(none.exit_code, kConfig) << none.describe();
  EXPECT_TRUE(contains(none.err, "no tokenizer: --tokenizer is not set")) << none.err;
}

}  // namespace
}  // namespace mtrain::functional
