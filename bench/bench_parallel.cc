// bench_parallel: tokens/s of bench_train's tiny-Llama shape under different
// parallel layouts on the same cores, measured in one invocation: 1 rank x 2
// threads, 2 ranks data parallel, TP=2 and PP=2 (1 thread per rank). Each
// layout is one run of the real `mtrain pt` binary on the demo text (same
// shape, data, seed and global batch); its last rank's logging.jsonl gives
// the step times and the time spent inside collectives / p2p. The machine's
// sgemm rate is probed between the runs as in bench_train. See bench/README.md.
#include <cblas.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <omp.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "parallel_runs.h"
#include "sgemm_probe.h"
#include "shapes.h"

namespace {

namespace fs = std::filesystem;
using mtrain::bench::Layout;
using mtrain::bench::RunResult;
using mtrain::bench::StepLog;

struct Flags {
  int steps = 4;
  int warmup = 2;
  int64_t global_batch = 32;
  int64_t seq_length = 0;   // 0: the shape's 256
  int64_t micro_batch = 0;  // 0: the shape's 8
  int rounds = 3;
  int cores = 0;  // 0: the CPUs this process may run on
  std::string layouts = "all";
  std::string omp_wait_policy = "inherit";  // passive was ~10% slower for 1x2 on an idle machine
  int sgemm_size = 2048;
  int sgemm_reps = 2;  // per probe
  std::string mtrain = MTRAIN_BINARY;
  std::string dataset = std::string(MTRAIN_SOURCE_DIR) + "/configs/demo/pt.txt";
  std::string tokenizer = std::string(MTRAIN_SOURCE_DIR) + "/configs/demo/tokenizer.json";
  std::string work_dir;
  bool keep = false;
  int timeout_s = 300;
  std::string json_path;
};

// A run during which other processes kept more than this many cores busy is
// "disturbed"; a layout's numbers come from its quiet runs when it has any.
constexpr double kQuietCores = 0.1;

struct Summary {
  double ms = 0, tokens = 0, tokens_per_s = 0, gflops = 0, comm_ms = 0, comm_share = 0, comm_mb = 0, sim_ms = 0;
  double wall_s = 0, others_cores = 0, last_loss = 0;
  int runs_used = 0, runs = 0;
};

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a.empty() ? "?" : a + " " + b + " " + c;
}

Summary summarize(const std::vector<RunResult>& runs, double flops_per_token) {
  std::vector<double> ms, comm_ms, share, mb, sim_ms;
  Summary s;
  s.runs = static_cast<int>(runs.size());
  const bool any_quiet = std::any_of(runs.begin(), runs.end(), [](const RunResult& r) {
    return r.others_cores >= 0 && r.others_cores <= kQuietCores;
  });
  for (const RunResult& r : runs) {
    if (any_quiet && !(r.others_cores >= 0 && r.others_cores <= kQuietCores)) continue;
    ++s.runs_used;
    s.wall_s += r.wall_s;
    s.others_cores = std::max(s.others_cores, r.others_cores);
    for (const StepLog& st : r.steps) {
      ms.push_back(st.ms);
      comm_ms.push_back(st.comm_s * 1e3);
      share.push_back(st.comm_s * 1e3 / st.ms);
      mb.push_back(st.comm_bytes / (1 << 20));
      sim_ms.push_back(st.simulated_ms);
      s.tokens = st.tokens;
      s.last_loss = st.loss;
    }
  }
  using mtrain::bench::median;
  s.wall_s /= s.runs_used;
  s.ms = median(ms);
  s.tokens_per_s = s.tokens / (s.ms * 1e-3);
  s.gflops = s.tokens_per_s * flops_per_token * 1e-9;
  s.comm_ms = median(comm_ms);
  s.comm_share = median(share);
  s.comm_mb = median(mb);
  s.sim_ms = median(sim_ms);
  return s;
}

std::vector<Layout> chosen_layouts_named(const std::vector<Layout>& all, const std::vector<std::string>& names) {
  std::vector<Layout> out;
  for (const std::string& name : names) {
    auto it = std::find_if(all.begin(), all.end(), [&](const Layout& l) { return l.name == name; });
    if (it == all.end()) throw CLI::ValidationError("--layouts", "unknown layout " + name);
    out.push_back(*it);
  }
  return out;
}

std::vector<Layout> chosen_layouts(const Flags& f) {
  std::vector<Layout> all = mtrain::bench::known_layouts(f.cores, mtrain::bench::tiny_llama().config.num_layers), out;
  if (f.layouts == "cp") return chosen_layouts_named(all, {all[0].name, "dp2", "cp2", "cp2u"});
  if (f.layouts == "all") {
    for (const Layout& l : all)
      if (l.standard) out.push_back(l);
    return out;
  }
  std::vector<std::string> names;
  std::stringstream ss(f.layouts);
  for (std::string name; std::getline(ss, name, ',');) names.push_back(name);
  return chosen_layouts_named(all, names);
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"bench_parallel: tiny-Llama training throughput of 1 rank x N threads vs DP=2, TP=2, PP=2"};
  app.add_option("--steps", f.steps, "timed steps per run")->check(CLI::PositiveNumber);
  app.add_option("--warmup", f.warmup, "logged steps dropped first in every run")->check(CLI::NonNegativeNumber);
  app.add_option("--global_batch", f.global_batch, "samples per step (micro batch 8 x seq 256 each)")
      ->check(CLI::PositiveNumber);
  app.add_option("--seq_length", f.seq_length, "tokens per sample instead of 256 (e.g. 4096 for the CP row)")
      ->check(CLI::PositiveNumber);
  app.add_option("--micro_batch", f.micro_batch, "samples per micro-batch instead of 8")->check(CLI::PositiveNumber);
  app.add_option("--rounds", f.rounds, "run the layouts this many times, round robin")->check(CLI::PositiveNumber);
  app.add_option("--cores", f.cores, "threads of the 1-rank layout and of the sgemm probe (default: usable CPUs)");
  app.add_option("--layouts", f.layouts,
                 "all (1xN,dp2,tp2,pp2), cp (1xN,dp2,cp2,cp2u) or a comma list of those and tp2sp, pp2u, cp2, cp2u");
  app.add_option(
         "--omp_wait_policy", f.omp_wait_policy,
         "OMP_WAIT_POLICY of the runs (passive helps 1xN only when other jobs share the cores); inherit: leave it")
      ->check(CLI::IsMember({"passive", "active", "inherit"}));
  app.add_option("--sgemm_size", f.sgemm_size, "M = N = K of the sgemm probe")->check(CLI::PositiveNumber);
  app.add_option("--sgemm_reps", f.sgemm_reps,
                 "timed sgemm calls per probe (one probe before, between and after the runs)")
      ->check(CLI::PositiveNumber);
  app.add_option("--mtrain", f.mtrain, "the mtrain binary");
  app.add_option("--dataset", f.dataset, "pretraining text");
  app.add_option("--tokenizer", f.tokenizer, "tokenizer.json");
  app.add_option("--work_dir", f.work_dir, "where the runs write (default: a new /tmp/bench_parallel.XXXXXX)");
  app.add_flag("--keep", f.keep, "keep the work dir (always kept when a run fails)");
  app.add_option("--timeout", f.timeout_s, "seconds per run before it is stopped")->check(CLI::PositiveNumber);
  app.add_option("--json", f.json_path, "also write the results as JSON to this file");
  CLI11_PARSE(app, argc, argv);
  if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK")) {
    std::fprintf(stderr, "bench_parallel: run it directly, not under mpirun (it starts mtrain's own launches)\n");
    return 2;
  }
  if (access(f.mtrain.c_str(), X_OK) != 0 || !fs::is_regular_file(f.dataset) || !fs::is_regular_file(f.tokenizer)) {
    std::fprintf(stderr, "bench_parallel: need an executable --mtrain (%s), --dataset (%s) and --tokenizer (%s)\n",
                 f.mtrain.c_str(), f.dataset.c_str(), f.tokenizer.c_str());
    return 2;
  }
  if (f.cores <= 0) f.cores = usable_cores();
  std::vector<Layout> layouts;
  try {
    layouts = chosen_layouts(f);
  } catch (const CLI::Error& e) {
    return app.exit(e);
  }

  mtrain::bench::RunSpec spec;
  spec.mtrain = f.mtrain;
  spec.dataset = f.dataset;
  spec.tokenizer = f.tokenizer;
  spec.model = mtrain::bench::tiny_llama().config;
  if (f.seq_length > 0) spec.model.seq_length = spec.model.max_positions = f.seq_length;
  if (f.micro_batch > 0) spec.model.micro_batch = f.micro_batch;
  spec.global_batch = f.global_batch;
  spec.warmup = f.warmup;
  spec.steps = f.steps;
  spec.omp_wait_policy = f.omp_wait_policy == "inherit" ? "" : f.omp_wait_policy;
  spec.timeout_s = f.timeout_s;
  const mtrain::model::ModelConfig& c = spec.model;
  if (f.global_batch % (2 * c.micro_batch) != 0) {
    std::fprintf(stderr, "bench_parallel: --global_batch must be a multiple of 2 x micro batch (%ld)\n",
                 static_cast<long>(2 * c.micro_batch));
    return 2;
  }
  if (f.work_dir.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "bench_parallel.XXXXXX").string();
    if (!mkdtemp(tmpl.data())) {
      std::perror("bench_parallel: mkdtemp");
      return 1;
    }
    f.work_dir = tmpl;
  }
  fs::create_directories(f.work_dir);

  omp_set_num_threads(f.cores);
  openblas_set_num_threads(f.cores);  // OpenBLAS sizes its GEMMs from its own count
  const int64_t tokens_per_step = f.global_batch * c.seq_length;
  const double flops_per_token = mtrain::bench::model_flops(c, tokens_per_step, c.seq_length) / tokens_per_step;
  fmt::print("bench_parallel: {} cores, load average {} (1/5/15 min)\n", f.cores, load_average());
  fmt::print("model: {} (bench_train's tiny-llama{})\n", mtrain::model::describe(c),
             f.seq_length > 0 || f.micro_batch > 0 ? ", other batch shape" : "");
  fmt::print("data: mtrain pt on {}; global batch {} x {} = {} tokens/step (micro batch {}), {:.2f} GFLOP/step\n",
             f.dataset, f.global_batch, c.seq_length, tokens_per_step, c.micro_batch,
             flops_per_token * tokens_per_step * 1e-9);
  const char* env_policy = getenv("OMP_WAIT_POLICY");
  const std::string policy = f.omp_wait_policy != "inherit" ? f.omp_wait_policy + " (set by --omp_wait_policy)"
                             : env_policy                   ? std::string(env_policy) + " (inherited)"
                                                            : "unset (libgomp's default: spin briefly, then sleep)";
  fmt::print("runs: {} warm-up + {} timed steps each, {} round(s); OMP_WAIT_POLICY {}; binary {}\n", f.warmup, f.steps,
             f.rounds, policy, f.mtrain);
  fmt::print("work dir: {}\n\n", f.work_dir);
  std::fflush(stdout);

  std::vector<std::vector<RunResult>> results(layouts.size());
  mtrain::bench::SgemmRate sgemm;
  std::vector<double> probe_best;
  const int probes = f.rounds * static_cast<int>(layouts.size()) + 1;
  bool failed = false;
  std::string mpirun_cmd;
  for (int p = 0; p < probes; ++p) {
    const mtrain::bench::SgemmRate s = mtrain::bench::measure_sgemm(f.sgemm_size, f.sgemm_reps);
    sgemm = sgemm.gflops.empty() ? s : mtrain::bench::combine(sgemm, s);
    probe_best.push_back(s.best_gflops);
    if (p + 1 == probes) break;
    const size_t li = static_cast<size_t>(p) % layouts.size();
    const Layout& l = layouts[li];
    const RunResult r = mtrain::bench::run_layout(spec, l, f.work_dir);
    if (mpirun_cmd.empty()) mpirun_cmd = r.mpirun_command;
    fmt::print("{:<5} {:<44} exit {}{}, {:.1f} s wall, {:.1f} s CPU, other processes {:.2f} cores, {} timed steps\n",
               l.name, l.what, r.exit_code, r.timed_out ? " (timed out)" : "", r.wall_s, r.cpu_s, r.others_cores,
               r.steps.size());
    std::fflush(stdout);
    if (!r.ok()) {
      failed = true;
      fmt::print("  log {}:\n{}", r.log_path, mtrain::bench::tail_of(r.log_path, 15));
      continue;
    }
    results[li].push_back(r);
  }
  const double ref = sgemm.best_gflops;
  fmt::print("\nsgemm {}^3, {} threads: best {:.1f} GFLOP/s (reference), median {:.1f} over {} calls\n", sgemm.size,
             f.cores, ref, sgemm.median_gflops, sgemm.gflops.size());
  // A probe well below the best means the machine itself was slower then
  // (e.g. a neighbour on the host), which /proc/stat does not show.
  fmt::print("sgemm probes before, between and after the runs (best of each): {:.0f} GFLOP/s\n",
             fmt::join(probe_best, " "));
  if (!mpirun_cmd.empty())  // the launcher's options, without the mtrain command line
    fmt::print("multi-rank runs: NPROC_PER_NODE=2, mtrain launched `{} <mtrain ...>`\n",
               mpirun_cmd.substr(0, mpirun_cmd.find(" " + f.mtrain)));
  fmt::print("load average after the runs: {}\n\n", load_average());

  fmt::print("{:<5} {:>7} {:>8} {:>9} {:>9} {:>7} {:>8} {:>7} {:>8} {:>7} {:>8} {:>5} {:>7} {:>8} {:>8} {:>7}\n", "run",
             "ranks", "ms/step", "tokens/s", "tok/s/dev", "vs 1xN", "GFLOP/s", "% sgemm", "comm ms", "comm %",
             "comm MB", "runs", "others", "loss", "sim ms", "sim vs");
  nlohmann::json jl = nlohmann::json::array();
  double base = 0, sim_base = 0;
  int left_out = 0, disturbed = 0;
  for (size_t i = 0; i < layouts.size(); ++i) {
    const Layout& l = layouts[i];
    if (results[i].empty()) {
      fmt::print("{:<5} failed\n", l.name);
      continue;
    }
    const Summary s = summarize(results[i], flops_per_token);
    if (l.ranks == 1 && base == 0) {
      base = s.tokens_per_s;
      sim_base = s.sim_ms;
    }
    const std::string vs = base > 0 ? fmt::format("{:.2f}x", s.tokens_per_s / base) : "-";
    // The simulated NPU's step time of the same layout (--log_throughput), and its speedup over 1xN's.
    const std::string sim_vs = sim_base > 0 && s.sim_ms > 0 ? fmt::format("{:.2f}x", sim_base / s.sim_ms) : "-";
    fmt::print(
        "{:<5} {:>7} {:>8.1f} {:>9.0f} {:>9.0f} {:>7} {:>8.1f} {:>6.1f}% {:>8.1f} {:>6.1f}% {:>8.1f} {:>5} {:>7.2f} "
        "{:>8.4f} {:>8.2f} {:>7}\n",
        l.name, fmt::format("{}x{}", l.ranks, l.threads), s.ms, s.tokens_per_s, s.tokens_per_s / l.ranks, vs, s.gflops,
        100 * s.gflops / ref, s.comm_ms, 100 * s.comm_share, s.comm_mb, fmt::format("{}/{}", s.runs_used, s.runs),
        s.others_cores, s.last_loss, s.sim_ms, sim_vs);
    left_out += s.runs - s.runs_used;
    if (s.others_cores > kQuietCores) ++disturbed;
    if (static_cast<int64_t>(s.tokens + 0.5) != tokens_per_step)
      fmt::print("      warning: the log says {:.0f} tokens/step, expected {}\n", s.tokens, tokens_per_step);
    nlohmann::json runs = nlohmann::json::array();
    for (const RunResult& r : results[i]) {
      nlohmann::json steps = nlohmann::json::array();
      for (const StepLog& st : r.steps)
        steps.push_back({{"ms", st.ms},
                         {"comm_seconds", st.comm_s},
                         {"comm_bytes", st.comm_bytes},
                         {"simulated_ms", st.simulated_ms}});
      runs.push_back({{"wall_s", r.wall_s}, {"cpu_s", r.cpu_s}, {"others_cores", r.others_cores}, {"steps", steps}});
    }
    jl.push_back({{"name", l.name},
                  {"what", l.what},
                  {"ranks", l.ranks},
                  {"threads_per_rank", l.threads},
                  {"args", l.args},
                  {"ms_per_step", s.ms},
                  {"tokens_per_s", s.tokens_per_s},
                  {"tokens_per_s_per_device", s.tokens_per_s / l.ranks},
                  {"simulated_ms_per_step", s.sim_ms},
                  {"simulated_vs_baseline", sim_base > 0 && s.sim_ms > 0 ? sim_base / s.sim_ms : 0.0},
                  {"vs_baseline", base > 0 ? s.tokens_per_s / base : 0.0},
                  {"gflops", s.gflops},
                  {"fraction_of_sgemm", s.gflops / ref},
                  {"comm_ms_per_step", s.comm_ms},
                  {"comm_share", s.comm_share},
                  {"comm_mib_per_step", s.comm_mb},
                  {"wall_s", s.wall_s},
                  {"others_cores", s.others_cores},
                  {"runs_used", s.runs_used},
                  {"last_loss", s.last_loss},
                  {"runs", runs}});
  }
  fmt::print(
      "\nms/step, comm ms, comm MB: medians over the timed steps of the last rank (logging.jsonl); comm % = median "
      "of comm_seconds / step time\n(time inside collectives and p2p, waiting for the peer included); tokens/s = "
      "tokens/step / median ms; GFLOP/s = model FLOPs\n(bench::model_flops) / median step; % sgemm = that / the "
      "sgemm reference on all {} cores; others: CPU busy outside the run during it, in cores\n(/proc/stat minus the "
      "run's own CPU time; the worst run used); runs: runs used / made (runs with others > {} are left out\nwhen "
      "the layout has a quieter one); loss: the last step's (the layouts should agree); tok/s/dev = tokens/s / "
      "ranks;\nsim ms: the simulated NPU's step time of the same layout (logging.jsonl's "
      "simulated_device_time_per_iteration_ms, median), sim vs: 1xN's over it.\n",
      f.cores, kQuietCores);
  if (left_out > 0) fmt::print("\n{} disturbed run(s) left out.\n", left_out);
  if (disturbed > 0)
    fmt::print(
        "\nwarning: {} layout(s) had no quiet run (others > {}): their numbers are disturbed; rerun when the "
        "machine is idle (see `uptime`)\n",
        disturbed, kQuietCores);
  if (!f.json_path.empty()) {
    nlohmann::json j = {{"cores", f.cores},
                        {"global_batch", f.global_batch},
                        {"seq_length", c.seq_length},
                        {"micro_batch", c.micro_batch},
                        {"tokens_per_step", tokens_per_step},
                        {"flops_per_token", flops_per_token},
                        {"warmup_steps", f.warmup},
                        {"steps", f.steps},
                        {"rounds", f.rounds},
                        {"omp_wait_policy", f.omp_wait_policy},
                        {"sgemm",
                         {{"size", sgemm.size},
                          {"reference_gflops", ref},
                          {"reps_gflops", sgemm.gflops},
                          {"probe_best_gflops", probe_best}}},
                        {"mpirun", mpirun_cmd},
                        {"layouts", jl}};
    std::ofstream(f.json_path) << j.dump(2) << "\n";
    fmt::print("wrote {}\n", f.json_path);
  }
  if (!f.keep && !failed) fs::remove_all(f.work_dir);
  return failed ? 1 : 0;
}
