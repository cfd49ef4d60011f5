// A measured training run that `mtrain calibrate` fits a device profile to:
// its arguments (what step it ran, on how many devices) and its measured
// step time. Each `--runs` item is one of:
// - an mtrain run directory (--output_dir): args.json, and logging.jsonl's
//   "elapsed_time_per_iteration_ms" (or, without logging.jsonl, the one *.log
//   file in it holding the printed iteration lines);
// - a Megatron-LM stdout log (a file, or a directory holding one *.log / *.txt
//   file): its arguments block (megatron_args.h) and its iteration lines
//   " iteration N/ M | ... | elapsed time per iteration (ms): X | ..." (the
//   format of megatron-compat.md §4, which mtrain's own log line shares).
// Each iteration line is the mean over the iterations since the previous
// line (--log_interval of them). The measured step is the median of the
// lines whose iterations all come after the first `skip_iters` of the log
// (warm-up: allocator growth, NCCL/HCCL set-up, compilation); the first
// line of a log counts from iteration 0, so a resumed log's first line is
// always dropped with skip_iters > 0.
#pragma once

#include <string>
#include <vector>

#include "config/args.h"

namespace mtrain::calibrate {

struct MeasuredRun {
  std::string source;                // the path given
  std::string format;                // "mtrain" (args.json) or "megatron" (the arguments block)
  std::string log;                   // the file the iteration times came from
  config::Args args;                 // validated for args.world_size devices
  std::vector<double> iteration_ms;  // every iteration line, in order
  std::vector<int> iterations;       // the iteration each line reports
  int used_lines = 0;                // after the warm-up
  double measured_s = 0;             // the median of the used lines, seconds
};

struct ReadOptions {
  int skip_iters = 2;
  std::string device_profile;  // set on every run's args (the profile being calibrated)
};

// Throws DataError (file:line, hint) on an unreadable run or no usable
// iteration line, ConfigError (file:line) on arguments mtrain cannot take.
MeasuredRun read_measured_run(const std::string& path, const ReadOptions& options);

// The median (the mean of the middle two for an even count); `v` not empty.
double median(std::vector<double> v);

// "TP 8, PP 8 (VPP 3), DP 1, 64 devices, GBS 64, MBS 1, SP, selective recompute".
std::string layout_summary(const config::Args& args);

}  // namespace mtrain::calibrate
