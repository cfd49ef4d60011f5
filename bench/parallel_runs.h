// One training run of the real `mtrain` binary per parallel layout (1 rank x
// 2 threads, DP=2, TP=2, PP=2 ...), started as a child process, and the
// per-step numbers its last rank wrote to <output_dir>/logging.jsonl.
// Used by bench_parallel; see bench/README.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace mtrain::bench {

struct Layout {
  std::string name;               // "1x2", "dp2", "tp2", "pp2"
  std::string what;               // human description
  int ranks = 1;                  // > 1: NPROC_PER_NODE=ranks (mtrain re-launches itself under mpirun)
  int threads = 1;                // --num_threads per rank
  std::vector<std::string> args;  // parallel flags
  bool standard = true;           // one of the four the bench runs by default
};

// On a machine with `cores` cores: the four standard layouts (1 x cores
// threads, DP=2, TP=2, PP=2), then variants only run when named: TP=2 with
// sequence parallelism, PP=2 with num_layers-1 layers on the first stage
// (the last one also holds the output layer), and CP=2 by ring or Ulysses.
std::vector<Layout> known_layouts(int cores, int64_t num_layers);

// What every run shares: the binary, the data and the batch.
struct RunSpec {
  std::string mtrain;     // path of the mtrain binary
  std::string dataset;    // pt text file
  std::string tokenizer;  // tokenizer.json
  model::ModelConfig model;
  int64_t global_batch = 32;
  int warmup = 2;               // logged steps dropped before the timed ones
  int steps = 4;                // timed steps
  std::string omp_wait_policy;  // empty: leave the environment's
  int timeout_s = 300;
};

// The mtrain command line (without the program name) for one layout.
std::vector<std::string> mtrain_args(const RunSpec& spec, const Layout& layout, const std::string& output_dir);

// One logged step of the last rank.
struct StepLog {
  double ms = 0;          // elapsed_time_per_iteration_ms (log_interval 1: this step)
  double tokens = 0;      // tokens_per_second * ms: the global batch's tokens
  double comm_s = 0;      // comm_seconds: this rank's time inside collectives / p2p
  double comm_bytes = 0;  // comm_bytes
  double loss = 0;
  double simulated_ms = 0;  // simulated_device_time_per_iteration_ms: the simulated NPU's step (--log_throughput)
};

struct RunResult {
  int exit_code = 0;  // the launcher's (mpirun's) exit code; 128+N when killed by signal N
  bool timed_out = false;
  double wall_s = 0;           // process start to exit (incl. startup, data, MPI init and teardown)
  double cpu_s = 0;            // CPU time of the run: the launcher, mpirun and the ranks (wait4's rusage)
  double others_cores = -1;    // CPU busy outside the run during it, in cores (/proc/stat); -1: unknown
  std::string log_path;        // the child's stdout + stderr
  std::string mpirun_command;  // the launcher's `run sh:` line (multi-rank layouts)
  std::vector<StepLog> steps;  // timed steps only (after the warmup)
  bool ok() const { return exit_code == 0 && !timed_out && !steps.empty(); }
};

// Runs mtrain for `layout` with its output in work_dir/<name>/ and its log in
// work_dir/<name>.log; returns the timed steps of that run.
RunResult run_layout(const RunSpec& spec, const Layout& layout, const std::string& work_dir);

// The last `lines` lines of a file (for a failed run's report).
std::string tail_of(const std::string& path, int lines);

}  // namespace mtrain::bench
