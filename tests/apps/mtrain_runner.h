// End-to-end test harness: runs the real mtrain binary (MTRAIN_BIN) from the
// repository root (MTRAIN_SOURCE_DIR) with stdout and stderr captured to files
// in a fresh temporary directory, under a wall-clock timeout and an
// address-space cap. The cap matters: the simulated NPU has 64 GiB of HBM but
// every tensor is also real host memory, so a regression that lets a huge
// model through would otherwise be killed by the kernel's OOM killer (and take
// the machine with it) instead of failing one test.
//
// Also: reading logging.jsonl, the demo command lines every functional test
// starts from, and small text helpers for Megatron-format log lines.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace mtrain::functional {

namespace fs = std::filesystem;

struct RunOptions {
  double timeout_seconds = 120;
  uint64_t address_space_bytes = uint64_t{4} << 30;      // RLIMIT_AS of the child; the demo needs < 1 GiB
  std::vector<std::pair<std::string, std::string>> env;  // set in the child only
  std::vector<std::string> unset_env;                    // removed in the child only
  std::string stdin_path;                                // the child's stdin ("" = /dev/null)
};

struct RunResult {
  int exit_code = -1;  // -1 when killed by a signal or timed out
  int signal = 0;
  bool timed_out = false;
  double seconds = 0;
  std::string out, err;

  // For failure messages: how it ended and the tail of both streams.
  std::string describe() const {
    std::ostringstream s;
    s << "exit code " << exit_code;
    if (signal) s << ", killed by signal " << signal;
    if (timed_out) s << ", timed out";
    s << " after " << seconds << " s\n--- stderr ---\n" << err.substr(err.size() > 3000 ? err.size() - 3000 : 0);
    s << "\n--- stdout (tail) ---\n" << out.substr(out.size() > 3000 ? out.size() - 3000 : 0);
    return s.str();
  }
};

inline std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

inline void write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
}

// A fresh directory under $TMPDIR (or /tmp).
inline fs::path make_temp_dir(const std::string& tag) {
  const char* base = std::getenv("TMPDIR");
  std::string templ = std::string(base && *base ? base : "/tmp") + "/mtrain_" + tag + "_XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed for " + templ);
  return fs::path(buf.data());
}

// Runs `mtrain <args...>` from the repository root; stdout/stderr go to
// <capture_dir>/<tag>.out and .err (kept for debugging when a test fails).
inline RunResult run_mtrain(const std::vector<std::string>& args, const fs::path& capture_dir,
                            const std::string& tag = "run", const RunOptions& opts = {}) {
  const fs::path out_path = capture_dir / (tag + ".out");
  const fs::path err_path = capture_dir / (tag + ".err");
  std::vector<std::string> argv_s = {MTRAIN_BIN};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    const int out_fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err_fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out_fd < 0 || err_fd < 0 || chdir(MTRAIN_SOURCE_DIR) != 0) _exit(125);
    dup2(out_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    const int null_fd = open(opts.stdin_path.empty() ? "/dev/null" : opts.stdin_path.c_str(), O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    rlimit lim{static_cast<rlim_t>(opts.address_space_bytes), static_cast<rlim_t>(opts.address_space_bytes)};
    if (opts.address_space_bytes) setrlimit(RLIMIT_AS, &lim);
    for (const std::string& k : opts.unset_env) unsetenv(k.c_str());
    for (const auto& [k, v] : opts.env) setenv(k.c_str(), v.c_str(), 1);
    execv(argv[0], argv.data());
    _exit(126);
  }

  RunResult r;
  int status = 0;
  for (;;) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (elapsed > opts.timeout_seconds) {
      kill(pid, SIGKILL);  // our own child, by pid
      waitpid(pid, &status, 0);
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r.timed_out && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.out = read_text(out_path);
  r.err = read_text(err_path);
  return r;
}

// Base fixture: a fresh temporary directory per test, removed unless the test
// failed (then its path is printed so the captured output can be read).
class MtrainTest : public ::testing::Test {
 protected:
  void SetUp() override { tmp_ = make_temp_dir("func"); }
  void TearDown() override {
    if (HasFailure()) {
      std::fprintf(stderr, "[ kept ] captured runs in %s\n", tmp_.c_str());
    } else {
      std::error_code ec;
      fs::remove_all(tmp_, ec);
    }
  }
  RunResult run(const std::vector<std::string>& args, const std::string& tag = "run", const RunOptions& o = {}) {
    return run_mtrain(args, tmp_, tag, o);
  }
  fs::path tmp_;
};

// Base fixture of a suite whose tests share runs made once (in
// SetUpTestSuite or on first use; ctest runs each case in its own process):
// one temporary directory for the suite, removed after its last test unless
// a test failed (then kept and its path printed). A suite with more shared
// state calls SuiteTest::TearDownTestSuite() from its own.
class SuiteTest : public ::testing::Test {
 protected:
  static void make_suite_dir(const std::string& tag) { suite_dir_ref() = make_temp_dir(tag); }
  static const fs::path& suite_dir() { return suite_dir_ref(); }
  static void TearDownTestSuite() {
    if (::testing::UnitTest::GetInstance()->Failed()) {
      std::fprintf(stderr, "[ kept ] captured runs in %s\n", suite_dir().c_str());
    } else {
      std::error_code ec;
      fs::remove_all(suite_dir(), ec);
    }
  }

 private:
  static fs::path& suite_dir_ref() {
    static fs::path dir;
    return dir;
  }
};

// --- The demo command lines ------------------------------------------------

// "a b  c" -> {"a", "b", "c"}
inline std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> w;
  std::istringstream s(text);
  for (std::string x; s >> x;) w.push_back(x);
  return w;
}

inline std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The demo job (configs/sft_demo.yaml) cut to `iters` iterations. The lr
// schedule keeps the demo's own decay length (2400 = its train_iters), so the
// first iterations are exactly those of `scripts/demo.sh`. One thread: the
// reduction order of OpenBLAS and of the OpenMP kernels depends on the
// thread count, so only a fixed count gives bit-identical reruns.
inline std::vector<std::string> demo_sft_args(int iters, const fs::path& output_dir) {
  return concat(words("sft configs/sft_demo.yaml --lr_decay_iters 2400 --log_interval 1 --num_threads 1 "
                      "--num_generate_samples 0"),
                {"--train_iters", std::to_string(iters), "--output_dir", output_dir.string()});
}

// `mtrain pt` on the demo preset and the shipped raw-text corpus: 2 micro
// batches of 4 windows of 128 tokens per iteration (exercises accumulation).
inline std::vector<std::string> demo_pt_args(int iters, const fs::path& output_dir) {
  return concat(words("pt --model_preset demo --tokenizer configs/demo/tokenizer.json --dataset configs/demo/pt.txt "
                      "--micro_batch_size 4 --global_batch_size 8 --lr 1e-3 --lr_warmup_iters 2 --log_interval 1 "
                      "--num_threads 1"),
                {"--train_iters", std::to_string(iters), "--output_dir", output_dir.string()});
}

// `ranks` processes the way users launch them: NPROC_PER_NODE=<ranks> (mtrain
// re-runs itself under mpirun) on loopback, without multi-node variables
// from the environment; one rank is a plain process.
inline RunOptions launch_ranks(int ranks, double timeout_seconds = 300) {
  RunOptions o;
  o.timeout_seconds = timeout_seconds;
  o.address_space_bytes = 0;  // mpirun and its ranks map large shared-memory segments
  if (ranks > 1) {
    o.env = {{"NPROC_PER_NODE", std::to_string(ranks)},
             {"OMPI_MCA_oob_tcp_if_include", "lo"},
             {"OMPI_MCA_btl_tcp_if_include", "lo"},
             {"PMIX_MCA_ptl_base_if_include", "lo"}};
  }
  o.unset_env = {"NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_SIZE"};
  return o;
}

// The checkpoint tests' job: the demo for 20 iterations at lr 3e-4 (see
// test_mtrain_parallel.cc for why), 4 micro-batches of 2, saving every 10.
inline std::vector<std::string> checkpoint_job(const fs::path& out, const std::string& extra = "") {
  return concat(concat(words("sft configs/sft_demo.yaml --train_iters 20 --lr 3e-4 --min_lr 3e-5 --lr_decay_iters "
                             "2400 --micro_batch_size 2 --global_batch_size 8 --log_interval 1 --num_threads 1 "
                             "--num_generate_samples 0 --save_interval 10"),
                       words(extra)),
                {"--output_dir", out.string()});
}

inline std::string join(const std::vector<std::string>& v, const std::string& sep = " ") {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

// --- logging.jsonl --------------------------------------------------------

inline std::vector<nlohmann::json> read_jsonl(const fs::path& p) {
  std::vector<nlohmann::json> rows;
  std::ifstream f(p);
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

// The training rows (those with "loss"), in order.
inline std::vector<nlohmann::json> train_rows(const fs::path& output_dir) {
  std::vector<nlohmann::json> rows;
  for (auto& j : read_jsonl(output_dir / "logging.jsonl"))
    if (j.contains("loss")) rows.push_back(j);
  return rows;
}

// The --eval_interval evaluation rows (those with "eval_loss", without the
// final end-of-training evaluation), in order.
inline std::vector<nlohmann::json> eval_rows(const fs::path& output_dir) {
  std::vector<nlohmann::json> rows;
  for (auto& j : read_jsonl(output_dir / "logging.jsonl"))
    if (j.contains("eval_loss") && !j.value("end_of_training", false)) rows.push_back(j);
  return rows;
}

// "12/20" -> 12
inline int64_t iteration_of(const nlohmann::json& row) {
  const std::string s = row.at("iteration").get<std::string>();
  return std::stoll(s.substr(0, s.find('/')));
}

// --- stdout ---------------------------------------------------------------

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream s(text);
  std::string line;
  while (std::getline(s, line)) lines.push_back(line);
  return lines;
}

// Megatron's training log lines (" [date] iteration ...").
inline std::vector<std::string> training_lines(const std::string& out) {
  std::vector<std::string> r;
  for (const std::string& l : lines_of(out))
    if (l.find("] iteration ") != std::string::npos && l.find(" consumed samples: ") != std::string::npos)
      r.push_back(l);
  return r;
}

// The value of " <key>: <value> |" in a log line, or "" if the key is absent.
inline std::string field(const std::string& line, const std::string& key) {
  const std::string k = " " + key + ": ";
  const size_t p = line.find(k);
  if (p == std::string::npos) return "";
  const size_t b = p + k.size();
  const size_t e = line.find(" |", b);
  return line.substr(b, e == std::string::npos ? std::string::npos : e - b);
}

// Python's '{:.6E}'.format(v), e.g. 6.981649E+00.
inline std::string sci6(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6E", v);
  return buf;
}

inline bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

}  // namespace mtrain::functional
