// The progress line on a real pseudo-terminal (forkpty, 120 columns): a
// 2-rank `mtrain pt` (the launcher relays mpirun's output) and a one-process
// one (mtrain re-runs itself under its relay) draw tqdm's line, reach 100%,
// and leave Megatron's log lines intact: replayed as a terminal shows them
// (screen_rows), the rows hold the same log lines as a redirected run of the
// same job (timestamps and timings aside) and one final progress row. A
// redirected run has no '\r' and no bar; --disable_tqdm true / --progress
// false turn it off.
#include <poll.h>
#include <pty.h>
#include <sys/ioctl.h>

#include <regex>

#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

constexpr int kColumns = 120;

// Runs mtrain on a new pseudo-terminal; returns everything the terminal got.
RunResult run_on_terminal(const std::vector<std::string>& args, const RunOptions& opts) {
  std::vector<std::string> argv_s = {MTRAIN_BIN};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  winsize size{};
  size.ws_row = 40;
  size.ws_col = kColumns;
  int master = -1;
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = forkpty(&master, nullptr, nullptr, &size);
  if (pid < 0) throw std::runtime_error("forkpty failed");
  if (pid == 0) {
    if (chdir(MTRAIN_SOURCE_DIR) != 0) _exit(125);
    for (const std::string& k : opts.unset_env) unsetenv(k.c_str());
    for (const auto& [k, v] : opts.env) setenv(k.c_str(), v.c_str(), 1);
    unsetenv("MTRAIN_PROGRESS_RECORDS");
    execv(argv[0], argv.data());
    _exit(126);
  }
  RunResult r;
  char buf[4096];
  for (;;) {  // read until the terminal closes (EIO once the child and its children are gone)
    pollfd p{master, POLLIN, 0};
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (elapsed > opts.timeout_seconds) {
      kill(pid, SIGKILL);  // our own child, by pid
      r.timed_out = true;
      break;
    }
    if (poll(&p, 1, 200) <= 0) continue;
    const ssize_t n = read(master, buf, sizeof buf);
    if (n <= 0) break;
    r.out.append(buf, static_cast<size_t>(n));
  }
  int status = 0;
  waitpid(pid, &status, 0);
  close(master);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r.timed_out && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  return r;
}

// The drawings of the bar called `desc`, in order ("\r<desc>: ...ESC[K").
std::vector<std::string> bar_drawings(const std::string& screen, const std::string& desc = "Train") {
  std::vector<std::string> bars;
  static const std::regex draw("\r([^\r\n\x1b]+)\x1b\\[K");
  for (auto it = std::sregex_iterator(screen.begin(), screen.end(), draw); it != std::sregex_iterator(); ++it)
    if ((*it)[1].str().rfind(desc + ": ", 0) == 0) bars.push_back((*it)[1]);
  return bars;
}

// What a terminal shows for `bytes`, row by row (scrollback included, no
// wrapping): "\r" goes to column 0, "\n" to a new row, ESC[K erases to the
// end of the row, every other character (a UTF-8 sequence is one) is written
// over the cell at the cursor. Any other escape sequence fails the test.
std::vector<std::string> screen_rows(const std::string& bytes) {
  std::vector<std::vector<std::string>> rows(1);
  size_t col = 0;
  for (size_t i = 0; i < bytes.size();) {
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    if (c == '\r' || c == '\n') {
      if (c == '\n') rows.emplace_back();
      col = 0;
      ++i;
      continue;
    }
    if (c == 0x1b) {
      EXPECT_EQ(bytes.compare(i, 3, "\x1b[K"), 0) << "unexpected escape at byte " << i;
      rows.back().resize(std::min(rows.back().size(), col));
      i += 3;
      continue;
    }
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    std::vector<std::string>& row = rows.back();
    if (row.size() <= col) row.resize(col + 1, " ");
    row[col++] = bytes.substr(i, len);
    i += len;
  }
  std::vector<std::string> out;
  for (const auto& r : rows) {
    std::string line;
    for (const auto& cell : r) line += cell;
    out.push_back(line);
  }
  return out;
}

std::string joined(const std::vector<std::string>& rows) {
  std::string s;
  for (const auto& r : rows) s += r + "\n";
  return s;
}

// A log line without what differs between two runs of one job.
std::string comparable(const std::string& line) {
  std::string s = std::regex_replace(line, std::regex(R"(^ \[[-0-9: ]+\])"), " [time]");
  return std::regex_replace(s, std::regex(R"(elapsed time per iteration \(ms\): [0-9.]+)"), "elapsed (ms): x");
}

std::vector<std::string> comparable_lines(const std::string& out) {
  std::vector<std::string> r;
  for (const std::string& l : training_lines(out)) r.push_back(comparable(l));
  return r;
}

// Every drawing is tqdm's line for `total` iterations, the full terminal
// width; the iterations never go back; the last one is total/total.
void expect_sane_bars(const std::vector<std::string>& bars, int total) {
  ASSERT_FALSE(bars.empty());
  static const std::regex line(
      R"(^Train: +(\d+)%\|[^|]+\| (\d+)/(\d+) \[(\d\d:\d\d)<(\d\d:\d\d|\?), +(\?it/s|[0-9.]+(it/s|s/it))(, loss=[-0-9.e+]+, tokens/s=[0-9.]+[kMG]?)?\]$)");
  int64_t last = -1;
  for (const std::string& b : bars) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(b, m, line)) << "not a progress line: " << b;
    const int64_t n = std::stoll(m[2]);
    EXPECT_EQ(std::stoll(m[3]), total) << b;
    EXPECT_GE(n, last) << b;
    EXPECT_NEAR(std::stod(m[1]), 100.0 * n / total, 0.5) << b;
    // One column per code point: the bar fills the terminal's width.
    const size_t cols = std::count_if(b.begin(), b.end(), [](char c) { return (c & 0xC0) != 0x80; });
    EXPECT_EQ(cols, static_cast<size_t>(kColumns)) << b;
    if (n == total) {
      EXPECT_EQ(m[5], "00:00") << "no time left at 100%: " << b;
    }
    last = n;
  }
  EXPECT_EQ(last, total) << bars.back();
  EXPECT_TRUE(contains(bars.back(), "loss=")) << bars.back();
}

class ProgressTest : public MtrainTest {};

TEST_F(ProgressTest, TwoRanksOnATerminalDrawTheLineAndKeepTheLogLinesIntact) {
  const int iters = 12;
  const RunResult tty =
      run_on_terminal(concat(demo_pt_args(iters, tmp_ / "tty"), {"--log_interval", "4"}), launch_ranks(2));
  ASSERT_EQ(tty.exit_code, 0) << tty.describe();
  const RunResult file =
      run_mtrain(concat(demo_pt_args(iters, tmp_ / "file"), {"--log_interval", "4"}), tmp_, "file", launch_ranks(2));
  ASSERT_EQ(file.exit_code, 0) << file.describe();

  expect_sane_bars(bar_drawings(tty.out), iters);
  EXPECT_FALSE(contains(tty.out, "mtrain-progress")) << "a record reached the terminal";
  // On the screen: the log lines whole, each on its own row, and one
  // progress row left at the end (tqdm's leave=True), nothing of it elsewhere.
  const std::vector<std::string> rows = screen_rows(tty.out);
  const std::string shown = joined(rows);
  EXPECT_EQ(comparable_lines(shown), comparable_lines(file.out)) << shown;
  const auto bar_rows =
      std::count_if(rows.begin(), rows.end(), [](const std::string& r) { return contains(r, "Train:"); });
  EXPECT_EQ(bar_rows, 1) << shown;
  EXPECT_EQ(comparable_lines(file.out).size(), 3u);
  // Redirected: not a byte of the bar.
  EXPECT_FALSE(contains(file.out, "\r")) << file.out;
  EXPECT_FALSE(contains(file.out, "Train:")) << file.out;
  EXPECT_FALSE(contains(file.out + file.err, "mtrain-progress"));
}

TEST_F(ProgressTest, OneProcessOnATerminalAndTheSwitchesThatTurnItOff) {
  const int iters = 6;
  const RunResult on = run_on_terminal(demo_pt_args(iters, tmp_ / "on"), launch_ranks(1));
  ASSERT_EQ(on.exit_code, 0) << on.describe();
  expect_sane_bars(bar_drawings(on.out), iters);
  EXPECT_EQ(training_lines(joined(screen_rows(on.out))).size(), static_cast<size_t>(iters));
  for (const char* off : {"--disable_tqdm true", "--progress false"}) {
    const RunResult r = run_on_terminal(concat(demo_pt_args(iters, tmp_ / "off"), words(off)), launch_ranks(1));
    ASSERT_EQ(r.exit_code, 0) << off << "\n" << r.describe();
    EXPECT_FALSE(contains(r.out, "Train:")) << off;
    EXPECT_FALSE(contains(r.out, "\x1b[K")) << off;
    EXPECT_EQ(training_lines(r.out).size(), static_cast<size_t>(iters)) << off;
  }
}

TEST_F(ProgressTest, SftShowsItsTokenizationThenItsTraining) {
  const RunResult r = run_on_terminal(demo_sft_args(3, tmp_ / "sft"), launch_ranks(1));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::vector<std::string> tok = bar_drawings(r.out, "Tokenize");
  ASSERT_FALSE(tok.empty()) << r.out;
  // configs/demo/sft.jsonl holds 471 records; the line ends at all of them.
  EXPECT_TRUE(contains(tok.back(), "Tokenize: 100%|")) << tok.back();
  EXPECT_TRUE(contains(tok.back(), "| 471/471 [")) << tok.back();
  expect_sane_bars(bar_drawings(r.out), 3);
  EXPECT_LT(r.out.find("Tokenize: 100%"), r.out.find("Train: ")) << "tokenization comes first";
}

// The worker's side of the contract, without a terminal: told that its
// records are read (MTRAIN_PROGRESS_RECORDS=1), the training rank writes one
// record line per redraw and a closing one; --disable_tqdm true silences it.
TEST_F(ProgressTest, TheWorkerWritesRecordsOnlyWhenToldAndNotDisabled) {
  RunOptions told = launch_ranks(1);
  told.env.emplace_back("MTRAIN_PROGRESS_RECORDS", "1");
  const RunResult on = run_mtrain(demo_pt_args(3, tmp_ / "on"), tmp_, "on", told);
  ASSERT_EQ(on.exit_code, 0) << on.describe();
  int shows = 0, closes = 0;
  for (const std::string& l : lines_of(on.out)) {
    if (l.rfind("\x1b]mtrain-progress;show\tTrain\t", 0) == 0) ++shows;
    if (l.rfind("\x1b]mtrain-progress;close\tTrain\t3\t3\t", 0) == 0) ++closes;
  }
  EXPECT_GE(shows, 2) << on.out;  // the empty bar and at least the last iteration
  EXPECT_EQ(closes, 1) << on.out;
  const RunResult off =
      run_mtrain(concat(demo_pt_args(3, tmp_ / "off"), words("--disable_tqdm true")), tmp_, "off", told);
  ASSERT_EQ(off.exit_code, 0) << off.describe();
  EXPECT_FALSE(contains(off.out, "mtrain-progress")) << off.out;
}

TEST_F(ProgressTest, ErrorsOnATerminalStillReachIt) {
  // The child's error message and exit code pass through the relay.
  const RunResult r =
      run_on_terminal(concat(demo_pt_args(4, tmp_ / "bad"), {"--dataset", "no/such/file.txt"}), launch_ranks(1));
  EXPECT_EQ(r.exit_code, 4) << r.describe();
  EXPECT_TRUE(contains(r.out, "no/such/file.txt")) << r.out;
  // Killed mid-run (fault_injection.h: SIGKILL during the save of iteration 2):
  // the relay passes the code on and says so on a row of its own.
  RunOptions killed = launch_ranks(1);
  killed.env.emplace_back("MTRAIN_FAULT", "save_kill@2:shard");
  const RunResult k = run_on_terminal(concat(demo_pt_args(4, tmp_ / "killed"), words("--save_interval 2")), killed);
  EXPECT_EQ(k.exit_code, 137) << k.describe();
  const std::vector<std::string> rows = screen_rows(k.out);
  EXPECT_TRUE(std::find(rows.begin(), rows.end(), "mtrain: the run ended with exit code 137 (signal 9: Killed)") !=
              rows.end())
      << joined(rows);
}

TEST_F(ProgressTest, PreprocessDataShowsItsProgressOnATerminal) {
  std::string jsonl;
  for (int i = 0; i < 50; ++i) jsonl += "{\"text\": \"The capital of France is Paris. " + std::to_string(i) + "\"}\n";
  write_text(tmp_ / "in.jsonl", jsonl);
  const std::string prefix = (tmp_ / "corpus").string();
  const RunResult r = run_on_terminal({"preprocess_data", "--input", (tmp_ / "in.jsonl").string(), "--output_prefix",
                                       prefix, "--tokenizer", "configs/demo/tokenizer.json"},
                                      launch_ranks(1));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::vector<std::string> bars = bar_drawings(r.out, "Preprocess");
  ASSERT_FALSE(bars.empty()) << r.out;
  EXPECT_TRUE(contains(bars.back(), "Preprocess: 100%|")) << bars.back();
  EXPECT_TRUE(contains(bars.back(), "| 50/50 [")) << bars.back();
  EXPECT_TRUE(contains(joined(screen_rows(r.out)), "Processed 50 documents")) << r.out;
  EXPECT_TRUE(fs::exists(prefix + "_text_document.idx"));
}

TEST_F(ProgressTest, PlanShowsItsLayoutSearchOnATerminal) {
  RunOptions world = launch_ranks(1);
  world.env = {{"NNODES", "1"}, {"NPROC_PER_NODE", "4"}};
  const RunResult r = run_on_terminal(
      words("plan --model_preset qwen2.5-7b --global_batch_size 8 --seq_length 1024 --bf16 --top 1"), world);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::vector<std::string> bars = bar_drawings(r.out, "Plan");
  ASSERT_FALSE(bars.empty()) << r.out;
  static const std::regex done(R"(^Plan: 100%\|[^|]+\| (\d+)/\1 \[.*(layout/s|s/layout), fit=\d+\]$)");
  EXPECT_TRUE(std::regex_match(bars.back(), done)) << bars.back();
  // The search's report follows the finished line, whole.
  const std::vector<std::string> rows = screen_rows(r.out);
  EXPECT_TRUE(std::any_of(rows.begin(), rows.end(), [](const std::string& row) {
    return row.rfind("1: mtrain ", 0) == 0;
  })) << joined(rows);
}

TEST_F(ProgressTest, ExportShowsItsTensorsOnATerminal) {
  const RunResult train =
      run_mtrain(concat(demo_pt_args(3, tmp_ / "ckpt"), words("--save_interval 3")), tmp_, "train", launch_ranks(1));
  ASSERT_EQ(train.exit_code, 0) << train.describe();
  const RunResult r =
      run_on_terminal({"export", "--to_hf", "--load", (tmp_ / "ckpt").string(), "--output_dir", (tmp_ / "hf").string()},
                      launch_ranks(1));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::vector<std::string> bars = bar_drawings(r.out, "Export");
  ASSERT_FALSE(bars.empty()) << r.out;
  // Every tensor fetched and written: n/n.
  EXPECT_TRUE(contains(bars.back(), "Export: 100%|")) << bars.back();
  EXPECT_TRUE(std::regex_search(bars.back(), std::regex(R"(\| (\d+)/\1 \[.*tensor)"))) << bars.back();
  const std::vector<std::string> rows = screen_rows(r.out);
  EXPECT_TRUE(std::any_of(rows.begin(), rows.end(), [](const std::string& row) {
    return row.rfind("  successfully saved Hugging Face model to ", 0) == 0;
  })) << joined(rows);
}

TEST_F(ProgressTest, ACheckpointSaveShowsItsTensorsBetweenMegatronsSaveLines) {
  const RunResult r =
      run_on_terminal(concat(demo_pt_args(3, tmp_ / "run"), words("--save_interval 3")), launch_ranks(1));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::vector<std::string> bars = bar_drawings(r.out, "Save checkpoint");
  ASSERT_FALSE(bars.empty()) << r.out;
  // Every tensor of the rank's shard written: n/n, counted in tensors.
  EXPECT_TRUE(std::regex_search(bars.back(), std::regex(R"( 100%\|.*\| (\d+)/\1 \[.*tensor)"))) << bars.back();
  // Drawn while the save runs: after Megatron's "saving checkpoint" line, before its "successfully saved".
  const size_t saving = r.out.find("saving checkpoint at iteration"), bar = r.out.find("Save checkpoint: 100%"),
               saved = r.out.find("successfully saved checkpoint from iteration");
  ASSERT_NE(saving, std::string::npos) << r.out;
  ASSERT_NE(saved, std::string::npos) << r.out;
  EXPECT_LT(saving, bar);
  EXPECT_LT(bar, saved);
}

TEST_F(ProgressTest, AResumedRunShowsItsCheckpointLoadingThenItsTraining) {
  const RunResult first =
      run_mtrain(concat(demo_pt_args(3, tmp_ / "run"), words("--save_interval 3 --lr_decay_iters 10")), tmp_, "first",
                 launch_ranks(1));
  ASSERT_EQ(first.exit_code, 0) << first.describe();
  const RunResult r = run_on_terminal(
      concat(demo_pt_args(5, tmp_ / "run"), {"--load", (tmp_ / "run").string(), "--save_interval", "100",
                                             "--lr_decay_iters", "10", "--override_opt_param_scheduler"}),
      launch_ranks(1));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  for (const char* desc : {"Load weights", "Load optimizer"}) {
    const std::vector<std::string> bars = bar_drawings(r.out, desc);
    ASSERT_FALSE(bars.empty()) << desc << "\n" << r.out;
    EXPECT_TRUE(std::regex_search(bars.back(), std::regex(R"( 100%\|.*\| (\d+)/\1 \[)"))) << bars.back();
  }
  // The training line counts on from the checkpoint's iteration 3.
  const std::vector<std::string> train = bar_drawings(r.out);
  ASSERT_FALSE(train.empty()) << r.out;
  EXPECT_TRUE(contains(train.front(), "| 3/5 [")) << train.front();
  EXPECT_TRUE(contains(train.back(), "Train: 100%|")) << train.back();
  EXPECT_LT(r.out.find("Load optimizer: 100%"), r.out.find("Train: ")) << "loading comes first";
}

}  // namespace
}  // namespace mtrain::functional
