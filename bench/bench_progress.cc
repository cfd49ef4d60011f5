// bench_progress: what the progress line costs a training step. Runs the
// demo job (configs/sft_demo.yaml, the real mtrain binary) with the line
// forced on (MTRAIN_PROGRESS_RECORDS=1, stdout a pipe this process reads
// through a ProgressTerminal that draws into /dev/null) for its step time, and
// times the worker's part per step in isolation: ProgressHook::on_step_end
// with a redraw at every step (worst case: min_interval 0, one record written
// and flushed per step) and the terminal side's handling of one record.
// Reports microseconds per step and their ratio to the demo's step time.
// Rates and ratios only; nothing is asserted. Usage: bench/README.md.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/progress.h"
#include "common/progress_terminal.h"
#include "observe/progress_hook.h"

namespace mtrain::bench {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Median elapsed ms per iteration of logging.jsonl's rows (log_interval 1).
double median_step_ms(const std::string& jsonl) {
  std::ifstream f(jsonl);
  std::vector<double> ms;
  for (std::string line; std::getline(f, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("elapsed_time_per_iteration_ms")) ms.push_back(j["elapsed_time_per_iteration_ms"]);
  }
  if (ms.size() < 3) return 0;
  ms.erase(ms.begin());  // the first step warms the allocator and caches
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// The demo for `iters` iterations, stdout through a ProgressTerminal into /dev/null.
double demo_step_ms(int iters, int threads, const std::string& out_dir) {
  int fds[2];
  if (pipe(fds) != 0) return 0;
  const std::vector<std::string> args = {MTRAIN_BINARY,
                                         "sft",
                                         "configs/sft_demo.yaml",
                                         "--train_iters",
                                         std::to_string(iters),
                                         "--log_interval",
                                         "1",
                                         "--num_threads",
                                         std::to_string(threads),
                                         "--num_generate_samples",
                                         "0",
                                         "--output_dir",
                                         out_dir};
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    if (chdir(MTRAIN_SOURCE_DIR) != 0) _exit(125);
    setenv(kProgressRecordsEnv, "1", 1);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(126);
  }
  close(fds[1]);
  const int null_fd = open("/dev/null", O_WRONLY);
  ProgressTerminal term([&](int, std::string_view b) { (void)!write(null_fd, b.data(), b.size()); },
                        [] { return 120; });
  char buf[1 << 16];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) term.feed(1, std::string_view(buf, n));
  term.finish();
  close(fds[0]);
  close(null_fd);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 0;
  return median_step_ms(out_dir + "/logging.jsonl");
}

// Microseconds per on_step_end with a redraw (record written to a pipe) at every step.
double hook_us_per_step(int steps) {
  int fds[2];
  if (pipe(fds) != 0) return 0;
  std::FILE* out = fdopen(fds[1], "w");
  ProgressRecordSink sink(out);
  // A clock that moves 0.2 s per call: every update is past min_interval and redraws.
  double now = 0;
  observe::ProgressHook hook(&sink, [&] { return now += 0.2; });
  observe::TrainInfo info;
  info.train_iters = steps;
  observe::StepMetrics m;
  m.train_iters = steps;
  m.tokens = 16 * 128;
  m.elapsed_ms = 95;
  double total = 0;
  char buf[1 << 16];
  hook.on_train_begin(info);
  for (int i = 1; i <= steps; ++i) {
    m.iteration = i;
    m.lm_loss = 2.0 + 1.0 / i;
    const auto t0 = std::chrono::steady_clock::now();
    hook.on_step_end(m);
    total += seconds_since(t0);
    (void)!read(fds[0], buf, sizeof buf);  // the terminal side drains it (not timed here)
  }
  hook.on_train_end(info);
  std::fclose(out);
  close(fds[0]);
  return total / steps * 1e6;
}

// Microseconds for the terminal side to take one record and redraw (into a string).
double terminal_us_per_record(int records) {
  std::string screen;
  ProgressTerminal term([&](int, std::string_view b) { screen.assign(b); }, [] { return 120; });
  ProgressState s;
  s.desc = "Train";
  s.total = records;
  s.rate = 10.4;
  s.postfix = "loss=0.523, tokens/s=41.2k";
  std::vector<std::string> recs;
  for (int i = 0; i < records; ++i) {
    s.n = i;
    s.elapsed = i * 0.1;
    recs.push_back(encode_progress_record(false, s));
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& r : recs) term.feed(1, r);
  return seconds_since(t0) / records * 1e6;
}

}  // namespace
}  // namespace mtrain::bench

int main(int argc, char** argv) {
  using namespace mtrain::bench;
  CLI::App app{"bench_progress: the progress line's cost per training step"};
  int iters = 30, threads = 2, reps = 20000;
  std::string out_dir = (std::filesystem::temp_directory_path() / "mtrain_bench_progress").string();
  app.add_option("--iters", iters, "demo iterations for the step time");
  app.add_option("--threads", threads);
  app.add_option("--reps", reps, "timed hook calls and records");
  app.add_option("--output_dir", out_dir);
  CLI11_PARSE(app, argc, argv);
  std::filesystem::remove_all(out_dir);
  const double step_ms = demo_step_ms(iters, threads, out_dir);
  const double hook_us = hook_us_per_step(reps);
  const double term_us = terminal_us_per_record(reps);
  fmt::print("bench_progress: demo sft, {} threads, {} iterations with the progress line on\n", threads, iters);
  fmt::print("  demo step (median):                      {:10.2f} ms\n", step_ms);
  fmt::print("  worker: on_step_end with a redraw:       {:10.2f} us  ({:.5f}% of the step)\n", hook_us,
             step_ms > 0 ? hook_us / (step_ms * 1e3) * 100 : 0);
  fmt::print("  terminal: one record taken and drawn:    {:10.2f} us  ({:.5f}% of the step)\n", term_us,
             step_ms > 0 ? term_us / (step_ms * 1e3) * 100 : 0);
  return step_ms > 0 ? 0 : 1;
}
