// TensorBoard event files of real runs (observe/tensorboard_hook.h), read back
// by two readers that share no code with the writer: the tests' C++ reader
// (tests/tensorboard/event_file_reader.h: own framing parser and bitwise
// CRC-32C, protobuf decoding) and a Python one under Debian's python3
// (tests/tensorboard/check_events.py: python-protobuf from a descriptor of
// TensorBoard's field numbers, the crc32c module). Values are checked against
// logging.jsonl of the same run and Megatron's tags; params norm also against
// the weights of the saved checkpoint.
#include <cmath>
#include <map>
#include <set>

#include "checkpoint/sharded_checkpoint.h"
#include "common/file_system.h"
#include "mtrain_runner.h"
#include "tensorboard/event_file_reader.h"

namespace mtrain::functional {
namespace {

using tbtest::Point;

constexpr int kFirst = 4, kTotal = 6, kBatch = 16;

std::vector<std::string> tb_job(const fs::path& out, int iters) {
  return concat(words("sft configs/sft_demo.yaml --lr_decay_iters 2400 --log_interval 1 --num_threads 1 "
                      "--num_generate_samples 0 --eval_interval 2 --eval_iters 1 --log_timers_to_tensorboard "
                      "--log_memory_to_tensorboard --log_validation_ppl_to_tensorboard "
                      "--log_world_size_to_tensorboard --log_params_norm --log_num_zeros_in_grad --log_throughput"),
                {"--train_iters", std::to_string(iters), "--output_dir", out.string()});
}

// Events of the files in `dir`, oldest file first; each file must read whole.
std::vector<std::vector<Point>> read_runs(const fs::path& dir) {
  std::vector<std::pair<double, std::vector<Point>>> files;
  for (const fs::path& p : tbtest::event_files(dir)) {
    const auto r = tbtest::read_event_file(p);
    EXPECT_EQ(r.error, "") << p;
    EXPECT_FALSE(r.truncated) << p;
    if (r.events.empty()) continue;
    EXPECT_EQ(r.events[0].file_version(), "brain.Event:2") << p;
    files.emplace_back(r.events[0].wall_time(), tbtest::scalars(r));
  }
  std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::vector<Point>> out;
  for (auto& f : files) out.push_back(std::move(f.second));
  return out;
}

std::vector<Point> curve(const std::vector<Point>& pts, const std::string& tag) {
  std::vector<Point> out;
  for (const Point& p : pts)
    if (p.tag == tag) out.push_back(p);
  return out;
}

class TensorBoard : public SuiteTest {
 protected:
  // A 6-iteration job whose rank crashes at the start of iteration 5 (after
  // evaluating at 2 and 4 and saving at 4), then the same job resumed.
  static void SetUpTestSuite() {
    make_suite_dir("tensorboard");
    RunOptions crash;
    crash.env = {{"MTRAIN_FAULT", "exit@5"}};
    first_ = new RunResult(run_mtrain(concat(tb_job(out(), kTotal), {"--save_interval", std::to_string(kFirst)}),
                                      suite_dir(), "first", crash));
    first_runs_ = new std::vector<std::vector<Point>>();
    if (fs::exists(out() / "runs")) *first_runs_ = read_runs(out() / "runs");
    resumed_ =
        new RunResult(run_mtrain(concat(tb_job(out(), kTotal), {"--load", out().string()}), suite_dir(), "resumed"));
  }
  static void TearDownTestSuite() {
    SuiteTest::TearDownTestSuite();
    delete first_;
    delete resumed_;
    delete first_runs_;
  }
  void SetUp() override {
    ASSERT_EQ(first_->exit_code, 1) << first_->describe();  // fault_injection.h's crash
    ASSERT_EQ(resumed_->exit_code, 0) << resumed_->describe();
  }
  static fs::path out() { return suite_dir() / "out"; }

  static RunResult *first_, *resumed_;
  static std::vector<std::vector<Point>>* first_runs_;
};
RunResult* TensorBoard::first_ = nullptr;
RunResult* TensorBoard::resumed_ = nullptr;
std::vector<std::vector<Point>>* TensorBoard::first_runs_ = nullptr;

TEST_F(TensorBoard, FirstRunWritesMegatronsTagsWithLoggingJsonlsValues) {
  ASSERT_EQ(first_runs_->size(), 1u);
  const std::vector<Point>& pts = (*first_runs_)[0];
  std::set<std::string> tags;
  for (const Point& p : pts) tags.insert(p.tag);
  std::set<std::string> want = {"iteration-time",        "throughput",          "simulated-iteration-time",
                                "mem-reserved-bytes",    "mem-allocated-bytes", "mem-max-allocated-bytes",
                                "lm loss validation ppl"};
  for (const char* t : {"learning-rate", "batch-size", "lm loss", "loss-scale", "world-size", "grad-norm", "num-zeros",
                        "params-norm", "lm loss validation", "lm loss validation ppl"}) {
    want.insert(t);
    want.insert(std::string(t) + " vs samples");
  }
  for (const char* c : {"weights", "gradients", "optimizer-states", "activations", "communication-buffers", "other"})
    want.insert(std::string("npu-memory/") + c + "-bytes");
  EXPECT_EQ(tags, want);

  // logging.jsonl holds the first run's rows, then the resumed run's.
  const auto rows = train_rows(out());
  ASSERT_EQ(rows.size(), static_cast<size_t>(kTotal));
  const std::map<std::string, std::string> key = {{"lm loss", "loss"},
                                                  {"learning-rate", "learning_rate"},
                                                  {"grad-norm", "grad_norm"},
                                                  {"params-norm", "params_norm"},
                                                  {"num-zeros", "num_zeros"},
                                                  {"loss-scale", "loss_scale"},
                                                  {"batch-size", "global_batch_size"}};
  for (const auto& [tag, k] : key) {
    const auto c = curve(pts, tag), vs = curve(pts, tag + " vs samples");
    ASSERT_EQ(c.size(), static_cast<size_t>(kFirst)) << tag;
    ASSERT_EQ(vs.size(), c.size()) << tag;
    for (int i = 0; i < kFirst; ++i) {
      // TensorBoard stores a float: the jsonl's double rounded once.
      const float v = static_cast<float>(rows[i].at(k).get<double>());
      EXPECT_EQ(c[i].step, i + 1) << tag;
      EXPECT_EQ(c[i].value, v) << tag << " at " << i + 1;
      EXPECT_EQ(vs[i].step, (i + 1) * kBatch) << tag;
      EXPECT_EQ(vs[i].value, v) << tag;
    }
  }
  for (const Point& p : curve(pts, "world-size")) EXPECT_EQ(p.value, 1.0f);
  // Megatron writes validation at the iteration (and the final evaluation again).
  const auto val = curve(pts, "lm loss validation");
  const auto ppl = curve(pts, "lm loss validation ppl");
  std::vector<nlohmann::json> evals;
  for (auto& j : read_jsonl(out() / "logging.jsonl"))
    if (j.contains("eval_loss") && j.at("iteration").get<int>() <= kFirst) evals.push_back(j);
  ASSERT_EQ(evals.size(), 2u);  // at 2 and 4: the crashed run has no final evaluation
  ASSERT_EQ(val.size(), evals.size());
  ASSERT_EQ(ppl.size(), evals.size());
  for (size_t i = 0; i < val.size(); ++i) {
    const double loss = evals[i].at("eval_loss").get<double>();
    EXPECT_EQ(val[i].step, evals[i].at("iteration").get<int>());
    EXPECT_EQ(val[i].value, static_cast<float>(loss));
    EXPECT_EQ(ppl[i].value, static_cast<float>(std::exp(std::min(20.0, loss))));
  }
}

// --log_throughput: the writer's throughput and simulated step time are the
// log line's (logging.jsonl's), i.e. the same Megatron FLOPs per iteration
// and the same simulated device clock reach both hooks. TensorBoard stores
// a float (one rounding, 2^-24 relative) of a value computed in another
// order of the same operations (a few double ulps).
TEST_F(TensorBoard, ThroughputTagsAreTheLogLinesNumbers) {
  const std::vector<Point>& pts = (*first_runs_).at(0);
  const auto rows = train_rows(out());
  const auto tflops = curve(pts, "throughput"), simulated = curve(pts, "simulated-iteration-time");
  ASSERT_EQ(tflops.size(), static_cast<size_t>(kFirst));
  ASSERT_EQ(simulated.size(), tflops.size());
  for (int i = 0; i < kFirst; ++i) {
    const double want = rows[i].at("throughput_tflops_per_gpu").get<double>();
    EXPECT_GT(want, 0);
    EXPECT_NEAR(tflops[i].value, want, 1e-7 * want) << "iteration " << i + 1;
    const double sim_s = rows[i].at("simulated_device_time_per_iteration_ms").get<double>() / 1000;
    EXPECT_GT(sim_s, 0);
    EXPECT_NEAR(simulated[i].value, sim_s, 1e-7 * sim_s) << "iteration " << i + 1;
  }
}

// The categories add up to the allocated bytes (each value is a float:
// one rounding each, bounded by the total's ulp times the count).
TEST_F(TensorBoard, MemoryByCategoryAddsUpToAllocated) {
  const std::vector<Point>& pts = (*first_runs_).at(0);
  const auto allocated = curve(pts, "mem-allocated-bytes");
  const auto weights = curve(pts, "npu-memory/weights-bytes"), peak = curve(pts, "mem-max-allocated-bytes");
  ASSERT_EQ(allocated.size(), static_cast<size_t>(kFirst));
  ASSERT_EQ(weights.size(), allocated.size());
  ASSERT_EQ(peak.size(), allocated.size());
  for (size_t i = 0; i < allocated.size(); ++i) {
    double sum = 0;
    for (const Point& p : pts)
      if (p.step == allocated[i].step && p.tag.rfind("npu-memory/", 0) == 0) sum += p.value;
    EXPECT_NEAR(sum, allocated[i].value, 7 * std::ldexp(double(allocated[i].value), -24)) << allocated[i].step;
    EXPECT_GT(weights[i].value, 0);
    EXPECT_GE(peak[i].value, allocated[i].value);
  }
}

TEST_F(TensorBoard, ResumedRunAddsASecondFileWhoseStepsContinue) {
  const auto runs = read_runs(out() / "runs");
  ASSERT_EQ(runs.size(), 2u);
  std::vector<int64_t> steps;
  for (const auto& run : runs)
    for (const Point& p : curve(run, "lm loss")) steps.push_back(p.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  const auto vs = curve(runs[1], "lm loss vs samples");
  ASSERT_EQ(vs.size(), 2u);
  EXPECT_EQ(vs[0].step, 5 * kBatch);
}

// The second reader, in Python, over both files.
TEST_F(TensorBoard, PythonReaderAgreesWithLoggingJsonl) {
  const fs::path expect = suite_dir() / "expect.json", log = suite_dir() / "check_events.log";
  write_text(expect, R"({"files": 2, "per_iteration": {"lm loss": "loss", "learning-rate": "learning_rate",
    "grad-norm": "grad_norm", "params-norm": "params_norm", "num-zeros": "num_zeros",
    "loss-scale": "loss_scale", "batch-size": "global_batch_size"}})");
  const std::string cmd = "/usr/bin/python3 " + std::string(MTRAIN_SOURCE_DIR) + "/tests/tensorboard/check_events.py " +
                          (out() / "runs").string() + " " + (out() / "logging.jsonl").string() + " " + expect.string() +
                          " > " + log.string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << read_text(log);
  EXPECT_TRUE(contains(read_text(log), "check_events: ok: 2 files")) << read_text(log);
}

// Megatron's order: ... | grad norm: | num zeros: | params norm: | number of skipped ...
TEST_F(TensorBoard, LogLineShowsNumZerosAndParamsNormInMegatronsPlace) {
  const auto lines = training_lines(first_->out);
  const auto rows = train_rows(out());
  ASSERT_EQ(lines.size(), static_cast<size_t>(kFirst));
  const std::regex order(R"( grad norm: [0-9.]+ \| num zeros: \d+ \| params norm: [0-9.]+ \| number of skipped)");
  for (int i = 0; i < kFirst; ++i) {
    EXPECT_TRUE(std::regex_search(lines[i], order)) << lines[i];
    EXPECT_EQ(field(lines[i], "num zeros"), std::to_string(rows[i].at("num_zeros").get<int64_t>()));
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3f", rows[i].at("params_norm").get<double>());
    EXPECT_EQ(field(lines[i], "params norm"), buf);
  }
}

// params norm after iteration 4 against the weights saved at iteration 4:
// sum of squares in double over every model tensor (one rank, nothing
// duplicated); both are double sums of the same floats in another order.
TEST_F(TensorBoard, ParamsNormIsTheNormOfTheSavedWeights) {
  PosixFileSystem pfs;
  const auto reader = checkpoint::CheckpointReader::open(pfs, out().string(), kFirst);
  double sq = 0;
  for (const std::string& name : reader.names()) {
    if (name.rfind("optimizer.", 0) == 0) continue;
    const Shape shape = reader.global_shape(name);
    std::vector<float> x(static_cast<size_t>(shape_numel(shape)));
    reader.read_block(name, std::vector<int64_t>(shape.size(), 0), shape, x.data());
    for (float v : x) sq += double(v) * v;
  }
  const double logged = train_rows(out()).at(kFirst - 1).at("params_norm").get<double>();
  EXPECT_NEAR(logged, std::sqrt(sq), 1e-9 * std::sqrt(sq));
}

class TensorBoardRuns : public MtrainTest {};

TEST_F(TensorBoardRuns, ReportToNoneWritesNoEventFile) {
  const RunResult r = run(concat(demo_sft_args(1, tmp_ / "out"), {"--report_to", "none"}));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_FALSE(fs::exists(tmp_ / "out" / "runs"));
  // The default writes one, in <output_dir>/runs.
  const RunResult d = run(demo_sft_args(1, tmp_ / "out2"), "default");
  ASSERT_EQ(d.exit_code, 0) << d.describe();
  EXPECT_EQ(tbtest::event_files(tmp_ / "out2" / "runs").size(), 1u);
}

TEST_F(TensorBoardRuns, NetworkIntegrationsAndUnknownOnesAreRefusedByName) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"wandb", "--report_to wandb: wandb needs a network connection"},
      {"swanlab", "--report_to swanlab: swanlab needs a network connection"},
      {"tensorboardx", "--report_to tensorboardx: unknown integration"}};
  for (const auto& [value, message] : cases) {
    const RunResult r = run(concat(demo_sft_args(1, tmp_ / "out"), {"--report_to", "tensorboard", value}), value);
    EXPECT_EQ(r.exit_code, 3) << r.describe();
    EXPECT_TRUE(contains(r.err, message)) << r.err;
    EXPECT_TRUE(contains(r.err, "hint:")) << r.err;
  }
  const RunResult mixed = run(concat(demo_sft_args(1, tmp_ / "out"), {"--report_to", "none", "tensorboard"}), "mixed");
  EXPECT_EQ(mixed.exit_code, 3) << mixed.describe();
  EXPECT_TRUE(contains(mixed.err, "none cannot be combined")) << mixed.err;
  EXPECT_FALSE(fs::exists(tmp_ / "out" / "runs"));
}

std::vector<int64_t> loss_steps(const fs::path& runs) {
  const auto files = tbtest::event_files(runs);
  EXPECT_EQ(files.size(), 1u);
  if (files.empty()) return {};
  const auto r = tbtest::read_event_file(files[0]);
  EXPECT_EQ(r.error, "");
  std::vector<int64_t> steps;
  for (const Point& p : curve(tbtest::scalars(r), "lm loss")) steps.push_back(p.step);
  return steps;
}

// A rank that dies at once (no unwinding) at the start of iteration 5: what
// the log line of iteration 4 flushed is in the file, iteration 5 is not.
TEST_F(TensorBoardRuns, KilledRunKeepsWhatItsLastLogLineFlushed) {
  RunOptions o;
  o.env = {{"MTRAIN_FAULT", "exit@5"}};
  const RunResult r = run(concat(words("sft configs/sft_demo.yaml --lr_decay_iters 2400 --log_interval 2 "
                                       "--num_threads 1 --num_generate_samples 0 --train_iters 8 --output_dir"),
                                 {(tmp_ / "out").string()}),
                          "killed", o);
  ASSERT_NE(r.exit_code, 0) << r.describe();
  EXPECT_EQ(loss_steps(tmp_ / "out" / "runs"), (std::vector<int64_t>{1, 2, 3, 4}));
}

// A run stopped by an error (NaN loss at iteration 3, exit 7) between log
// lines: the queue is written while the error unwinds.
TEST_F(TensorBoardRuns, RunStoppedByAnErrorWritesItsQueue) {
  const RunResult r =
      run(concat(words("sft configs/sft_demo.yaml --lr_decay_iters 2400 --log_interval 100 --num_threads 1 "
                       "--num_generate_samples 0 --train_iters 10 --lr 1e30 --clip_grad 0 --output_dir"),
                 {(tmp_ / "out").string()}));
  ASSERT_EQ(r.exit_code, 7) << r.describe();
  EXPECT_EQ(loss_steps(tmp_ / "out" / "runs"), (std::vector<int64_t>{1, 2}));
}

}  // namespace
}  // namespace mtrain::functional
