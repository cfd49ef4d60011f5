// Summary statistics of one tensor, as the precision dumper records them for
// every tensor at a region's edge (msprobe's Max/Min/Mean/Norm plus NaN/Inf
// counts). Sums are kept in double so that the statistics of tensor-parallel
// shards merge into those of the full tensor exactly as if computed whole:
// counts and sums add, max is the max of the maxima, min the min of the minima.
//
// max and min are over the finite values only (a NaN or an Inf would hide
// every other value); with no finite value they are NaN. sum and sum_sq are
// over the finite values too, so mean() and l2_norm() describe the finite
// part and nan / inf say how much is not finite.
#pragma once

#include <cstdint>

namespace mtrain::profiler {

struct TensorStats {
  int64_t count = 0;   // elements, finite or not
  int64_t finite = 0;  // finite elements: the population of max/min/sum
  int64_t nan = 0;
  int64_t inf = 0;  // +Inf and -Inf
  double max = 0;   // over finite values; NaN when finite == 0
  double min = 0;
  double sum = 0;     // sum of finite values
  double sum_sq = 0;  // sum of squares of finite values

  double mean() const;     // sum / finite (NaN when finite == 0)
  double l2_norm() const;  // sqrt(sum_sq)
  bool all_finite() const { return nan == 0 && inf == 0; }
};

// Statistics of data[0, n). data may be null only when n == 0.
TensorStats tensor_stats(const float* data, int64_t n);
// Statistics of the union of the tensors `a` and `b` describe (disjoint shards).
TensorStats merge_stats(const TensorStats& a, const TensorStats& b);

}  // namespace mtrain::profiler
