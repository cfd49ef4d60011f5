// bench_profile: the profiler's overhead. Trains bench_train's tiny-llama
// shape (4 layers, hidden 256, B=8 x T=256 tokens per step, fp32) through
// train::Trainer and reports the median step time with profiling off (no
// hook), with the hook installed but outside its window (what --profile costs
// on the iterations it does not record), and recording at level0/1/2 (+ the
// with_cpu / with_memory / with_stack / record_shapes options at level2).
// Rates and ratios only; nothing is asserted. Usage: bench/README.md.
#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>

#include "common/file_system.h"
#include "common/rng.h"
#include "data/loader.h"
#include "model/model_config.h"
#include "observe/profiler_hook.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "profiler/kernel_region.h"
#include "sgemm_probe.h"
#include "shapes.h"
#include "train/trainer.h"

namespace mtrain::bench {
namespace {

class RandomSource : public data::BatchSource {
 public:
  RandomSource(int64_t B, int64_t T, int64_t vocab) : B_(B), T_(T) {
    Rng rng(7);
    for (int i = 0; i < 64; ++i) {
      data::Sample s;
      for (int64_t t = 0; t <= T; ++t) {
        s.tokens.push_back(static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(vocab)));
        s.loss_mask.push_back(1);
      }
      samples_.push_back(std::move(s));
    }
  }
  std::vector<data::Batch> next_global_batch() override {
    std::vector<int64_t> idx;
    for (int64_t b = 0; b < B_; ++b) idx.push_back((next_ * B_ + b) % 64);
    ++next_;
    return {data::make_batch(samples_, idx, T_, 0)};
  }
  int64_t global_batch_samples() const override { return B_; }
  data::DataLoader::State position() const override { return {}; }
  void set_position(const data::DataLoader::State&) override {}

 private:
  std::vector<data::Sample> samples_;
  int64_t B_, T_, next_ = 0;
};

// Counts the regions of every kind a step opens.
struct RegionCount : observe::TrainHook {
  int64_t regions = 0;
  std::optional<profiler::Kind> region_depth(int64_t) const override { return profiler::Kind::kKernel; }
  void on_region_begin(const profiler::Region&, std::span<const profiler::TensorRef>) override { ++regions; }
};

// ns per probe site with nobody listening: what every region costs when profiling is off.
double idle_probe_ns() {
  constexpr int kN = 20'000'000;
  volatile int64_t sink = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kN; ++i) {
    profiler::Scope s(profiler::gemm_kernel("probe", i, 2, 3));
    sink = sink + s.on();
  }
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  return ns / kN;
}

struct StepTimes : observe::TrainHook {
  std::vector<double> ms;
  void on_step_end(const observe::StepMetrics& m) override { ms.push_back(m.elapsed_ms); }
};

// Median ms/step of `steps` timed steps after `warmup`; `prof` (may be null) joins the hooks.
double median_step_ms(const ShapeSpec& spec, int warmup, int steps, const observe::ProfilerOptions* prof,
                      const std::string& save_path, RegionCount* count = nullptr) {
  device::Device dev(device::DeviceProfile{}, 0);
  model::GptModel m(spec.config, dev);
  optim::OptimizerConfig oc;
  optim::Optimizer opt(dev, train::optimizer_ranges(m.params()), m.params().numel(), DType::kF32, oc);
  optim::LrScheduleConfig sc;
  sc.lr = 6e-4;
  sc.decay_iters = 1000;
  sc.style = "constant";
  optim::LrScheduler sched(sc);
  RandomSource src(spec.config.micro_batch, spec.config.seq_length, spec.config.vocab);
  observe::HookList hooks;
  auto times = std::make_shared<StepTimes>();
  hooks.add(times);
  if (count) hooks.add(std::shared_ptr<RegionCount>(count, [](RegionCount*) {}));
  PosixFileSystem pfs;
  if (prof) {
    observe::ProfilerOptions o = *prof;
    o.save_path = save_path;
    o.print_summary = false;
    o.quiet = true;
    hooks.add(std::make_shared<observe::ProfilerHook>(o, dev, nullptr, 0, pfs));
  }
  train::TrainerOptions to;
  to.train_iters = warmup + steps;
  to.global_batch_size = spec.config.micro_batch;
  train::Trainer t(to, m, opt, sched, nullptr, src, nullptr, hooks);
  t.train();
  std::vector<double> timed(times->ms.begin() + warmup, times->ms.end());
  std::sort(timed.begin(), timed.end());
  return timed[timed.size() / 2];
}

}  // namespace
}  // namespace mtrain::bench

int main(int argc, char** argv) {
  using namespace mtrain;
  CLI::App app{"bench_profile: step time with the profiler off and at each level"};
  int threads = 2, warmup = 2, steps = 6, rounds = 3;
  std::string save_path = (std::filesystem::temp_directory_path() / "mtrain_bench_profile").string();
  app.add_option("--threads", threads);
  app.add_option("--warmup", warmup);
  app.add_option("--steps", steps);
  app.add_option("--rounds", rounds, "modes run round-robin this many times (drift on a shared machine cancels)");
  app.add_option("--save_path", save_path);
  CLI11_PARSE(app, argc, argv);
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  const bench::ShapeSpec spec = bench::tiny_llama();
  // The window covers every timed step (warmup steps are not recorded).
  auto window = [&](profiler::Kind level, const char* name) {
    observe::ProfilerOptions o;
    o.schedule = profiler::Schedule::from_step_window(warmup, warmup + steps);
    o.level = level;
    o.level_name = name;
    return o;
  };
  observe::ProfilerOptions outside = window(profiler::Kind::kKernel, "level2");
  outside.schedule = profiler::Schedule::from_step_window(warmup + steps + 10, warmup + steps + 12);
  observe::ProfilerOptions all = window(profiler::Kind::kKernel, "level2");
  all.with_cpu = all.with_memory = all.with_stack = all.record_shapes = true;
  struct Mode {
    const char* name;
    std::optional<observe::ProfilerOptions> opts;
  };
  const std::vector<Mode> modes = {{"off (no profiler)", std::nullopt},
                                   {"--profile, outside the window", outside},
                                   {"level0", window(profiler::Kind::kPhase, "level0")},
                                   {"level1", window(profiler::Kind::kOp, "level1")},
                                   {"level2", window(profiler::Kind::kKernel, "level2")},
                                   {"level2 + cpu, memory, stack, shapes", all}};
  fmt::print("bench_profile: {} (B={} T={}), {} threads, median of {} rounds x {} steps after {} warmup\n", spec.name,
             spec.config.micro_batch, spec.config.seq_length, threads, rounds, steps, warmup);
  const bench::SgemmRate sgemm_before = bench::measure_sgemm(1024, 5);
  std::vector<std::vector<double>> ms(modes.size());
  // Each round starts at another mode, so no mode always runs first (cold caches).
  for (int r = 0; r < rounds; ++r) {
    for (size_t j = 0; j < modes.size(); ++j) {
      const size_t i = (j + r) % modes.size();
      ms[i].push_back(bench::median_step_ms(spec, warmup, steps, modes[i].opts ? &*modes[i].opts : nullptr, save_path));
    }
  }
  // The yardstick: this machine's sgemm rate, measured before and after the modes.
  const bench::SgemmRate sgemm = bench::combine(sgemm_before, bench::measure_sgemm(1024, 5));
  const int64_t tokens = spec.config.micro_batch * spec.config.seq_length;
  const double step_flops = bench::model_flops(spec.config, tokens, spec.config.seq_length);
  fmt::print("  sgemm 1024^3: {:.1f} GFLOP/s (median of {})\n", sgemm.median_gflops, sgemm.gflops.size());
  fmt::print("  {:<38} {:>9} {:>8} {:>10} {:>9}\n", "mode", "ms/step", "vs off", "tokens/s", "/sgemm");
  double base = 0;
  for (size_t i = 0; i < modes.size(); ++i) {
    std::sort(ms[i].begin(), ms[i].end());
    const double med = ms[i][ms[i].size() / 2];
    if (i == 0) base = med;
    fmt::print("  {:<38} {:9.2f} {:+7.2f}% {:10.0f} {:9.3f}\n", modes[i].name, med, 100.0 * (med / base - 1),
               tokens / (med / 1e3), step_flops / (med / 1e3) / 1e9 / sgemm.median_gflops);
  }
  bench::RegionCount count;
  bench::median_step_ms(spec, 0, 1, nullptr, save_path, &count);
  const double ns = bench::idle_probe_ns();
  fmt::print(
      "  regions per step (iteration..kernel): {}; an idle probe costs {:.2f} ns: {:.1f} us per step ({:.4f}%)\n",
      count.regions, ns, count.regions * ns / 1e3, 100.0 * count.regions * ns / 1e6 / base);
  return 0;
}
