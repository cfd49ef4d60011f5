// `mtrain compare A B`: finds where two precision dumps (precision_dump.h)
// part ways -- msprobe's compare, built in.
//
//   mtrain compare DUMP_A DUMP_B [--step N] [--rtol R] [--atol A] [--show N]
//
// Each argument is a dump root (--precision_dump_path) or one of its step<N>
// directories. The step's rank files are merged into the view of a single
// device: tensor-parallel shards by merging their statistics (replicated
// tensors from TP rank 0), pipeline stages by concatenation, so dumps taken
// with different TP / PP sizes compare; the data-parallel sizes must agree
// and DP rank 0 is compared. Records are walked in a canonical execution
// order (micro-batch; forward by stage, backward in reverse) and matched by
// name; a statistic diverges when |a - b| > atol + rtol * scale, scale =
// max(|a|, |b|) (for the mean also the tensors' RMS, as a mean near zero has
// no meaningful relative error); differing NaN/Inf counts always diverge.
// Exit 0: no divergence; kExitDiverged: a divergence; UsageError (2) for bad
// options or a missing directory or step; DataError (4) for a directory that
// is not a dump, unequal levels or data-parallel sizes.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace mtrain::observe {

inline constexpr int kExitDiverged = 9;

struct CompareOptions {
  std::string a, b;
  std::optional<int64_t> step;  // None: the first step both dumps hold
  double rtol = 1e-3;           // fp32 default; bf16 runs want ~1e-2
  double atol = 1e-6;
  int show = 20;  // table rows
  bool help = false;
};

CompareOptions parse_compare_args(const std::vector<std::string>& args);
std::string compare_help();

// One statistic of one tensor that differs.
struct StatDiff {
  std::string record, module, role, stat;
  double a = 0, b = 0, rel = 0;
  double over = 0;  // |a - b| / (atol + rtol * scale): > 1 diverges
  bool diverged = false;
};

struct CompareReport {
  int64_t step = 0;
  std::string layout_a, layout_b;                    // "tp 2, pp 1, dp 1, level L1, float32"
  int64_t compared = 0;                              // records in both
  std::vector<std::string> only_a, only_b;           // record names
  std::vector<StatDiff> diffs;                       // every compared statistic, canonical order
  std::optional<StatDiff> first_divergence;          // the first diverged statistic
  std::string first_nonfinite_a, first_nonfinite_b;  // "" when none; else "record (role: a NaN, b Inf)"
};

CompareReport compare_dumps(const CompareOptions& o);
// Prints the report; returns 0 or kExitDiverged.
int run_compare(const CompareOptions& o, std::ostream& out);

}  // namespace mtrain::observe
