// The machine's sgemm rate: cblas_sgemm on square fp32 matrices with the
// current OpenMP/OpenBLAS thread count; the yardstick bench_train divides the
// training throughput by.
#pragma once

#include <cstdint>
#include <vector>

namespace mtrain::bench {

struct SgemmRate {
  int64_t size = 0;            // M = N = K
  std::vector<double> gflops;  // one rate per timed repetition
  double best_gflops = 0;
  double median_gflops = 0;
};

// One untimed warm-up call, then `reps` timed calls of C = A·B (size^3).
SgemmRate measure_sgemm(int64_t size, int reps);
// The repetitions of both probes together (best and median recomputed).
SgemmRate combine(const SgemmRate& a, const SgemmRate& b);

double median(std::vector<double> v);

}  // namespace mtrain::bench
