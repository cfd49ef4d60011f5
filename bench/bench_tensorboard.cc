// bench_tensorboard: what TensorBoard logging costs a training step. Two
// measurements, then their ratio:
//  1. the TensorBoardHook (observe/tensorboard_hook.h) with every tag on
//     (timers, memory, world size, params norm, num zeros: 25 scalars per
//     iteration, --tensorboard_log_interval 1) fed synthetic step metrics,
//     the queue written at every --log_interval as in a run: microseconds per
//     iteration, median of several rounds;
//  2. the demo job's step (configs/sft_demo.yaml, a real run of the mtrain
//     binary with --report_to none): its median elapsed time per iteration
//     from logging.jsonl.
// Rates and ratios only; nothing is asserted. Usage: bench/README.md.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "device/device.h"
#include "observe/tensorboard_hook.h"

namespace mtrain::bench {
namespace {

namespace fs = std::filesystem;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Microseconds per iteration of the hook over `iters` iterations.
double hook_us_per_iteration(const fs::path& dir, int iters, int log_interval) {
  device::Device dev(device::DeviceProfile{}, 0);
  observe::TensorBoardOptions o;
  o.dir = dir.string();
  o.log_interval = log_interval;
  o.timers = o.memory = o.validation_ppl = o.world_size = true;
  observe::TensorBoardHook hook(o, dev);
  hook.on_train_begin({});
  observe::StepMetrics m;
  m.train_iters = iters;
  m.global_batch_size = 16;
  m.has_params_norm = m.has_num_zeros = true;
  const auto t0 = std::chrono::steady_clock::now();
  for (int it = 1; it <= iters; ++it) {
    m.iteration = it;
    m.consumed_samples = 16 * it;
    m.lm_loss = 3.0 / it;
    m.learning_rate = 1e-3;
    m.grad_norm = 0.5;
    m.params_norm = 100;
    m.num_zeros = it;
    m.elapsed_ms = 10;
    hook.on_step_end(m);
  }
  hook.on_train_end({});
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
}

// The demo job's median step time (ms), from a real run of `mtrain`.
double demo_step_ms(const std::string& mtrain, const fs::path& out, int iters) {
  const std::string cmd = fmt::format(
      "cd {} && {} sft configs/sft_demo.yaml --train_iters {} --lr_decay_iters 2400 --log_interval 1 --eval_interval 0 "
      "--num_generate_samples 0 --report_to none --output_dir {} > {}/run.log 2>&1",
      MTRAIN_SOURCE_DIR, mtrain, iters, out.string(), out.string());
  fs::create_directories(out);
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("the demo run failed; see " + out.string() + "/run.log");
  std::vector<double> ms;
  std::ifstream f(out / "logging.jsonl");
  for (std::string line; std::getline(f, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("elapsed_time_per_iteration_ms")) ms.push_back(j["elapsed_time_per_iteration_ms"].get<double>());
  }
  if (ms.size() > 2) ms.erase(ms.begin(), ms.begin() + 2);  // warm-up steps
  return median(ms);
}

int run(int argc, char** argv) {
  CLI::App app{"bench_tensorboard: the TensorBoard hook's cost per step against the demo's step time"};
  int iters = 2000, rounds = 5, demo_iters = 12, log_interval = 50;
  app.add_option("--iters", iters, "iterations per round of the hook");
  app.add_option("--rounds", rounds, "rounds of the hook (the median is reported)");
  app.add_option("--demo_iters", demo_iters, "iterations of the demo run");
  app.add_option("--log_interval", log_interval, "when the hook writes its queue (the demo's: 50)");
  CLI11_PARSE(app, argc, argv);
  const fs::path tmp = fs::temp_directory_path() / fmt::format("mtrain_bench_tb_{}", ::getpid());
  std::vector<double> us;
  for (int r = 0; r < rounds; ++r)
    us.push_back(hook_us_per_iteration(tmp / fmt::format("r{}", r), iters, log_interval));
  const double hook_us = median(us);
  fmt::print("TensorBoard hook: {:.2f} us/iteration (25 scalars, median of {} rounds of {} iterations)\n", hook_us,
             rounds, iters);
  const double step_ms = demo_step_ms(MTRAIN_BINARY, tmp / "demo", demo_iters);
  fmt::print("demo step (configs/sft_demo.yaml, --report_to none): {:.2f} ms/iteration\n", step_ms);
  fmt::print("TensorBoard cost / step time: {:.4f}%\n", 100.0 * hook_us / 1000.0 / step_ms);
  std::error_code ec;
  fs::remove_all(tmp, ec);
  return 0;
}

}  // namespace
}  // namespace mtrain::bench

int main(int argc, char** argv) { return mtrain::bench::run(argc, argv); }
