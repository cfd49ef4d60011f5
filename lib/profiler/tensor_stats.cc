#include "profiler/tensor_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mtrain::profiler {

double TensorStats::mean() const {
  return finite > 0 ? sum / static_cast<double>(finite) : std::numeric_limits<double>::quiet_NaN();
}

double TensorStats::l2_norm() const { return std::sqrt(sum_sq); }

TensorStats tensor_stats(const float* data, int64_t n) {
  TensorStats s;
  s.count = n;
  float mx = -std::numeric_limits<float>::infinity();
  float mn = std::numeric_limits<float>::infinity();
  double sum = 0, sum_sq = 0;
  int64_t nan = 0, inf = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = data[i];
    if (std::isnan(v)) {
      ++nan;
    } else if (std::isinf(v)) {
      ++inf;
    } else {
      mx = std::max(mx, v);
      mn = std::min(mn, v);
      sum += v;
      sum_sq += static_cast<double>(v) * v;
    }
  }
  s.nan = nan;
  s.inf = inf;
  s.finite = n - nan - inf;
  s.sum = sum;
  s.sum_sq = sum_sq;
  const double no_value = std::numeric_limits<double>::quiet_NaN();
  s.max = s.finite > 0 ? mx : no_value;
  s.min = s.finite > 0 ? mn : no_value;
  return s;
}

TensorStats merge_stats(const TensorStats& a, const TensorStats& b) {
  if (a.finite == 0 && a.count == 0) return b;
  if (b.finite == 0 && b.count == 0) return a;
  TensorStats s;
  s.count = a.count + b.count;
  s.finite = a.finite + b.finite;
  s.nan = a.nan + b.nan;
  s.inf = a.inf + b.inf;
  s.sum = a.sum + b.sum;
  s.sum_sq = a.sum_sq + b.sum_sq;
  if (a.finite == 0) {
    s.max = b.max, s.min = b.min;
  } else if (b.finite == 0) {
    s.max = a.max, s.min = a.min;
  } else {
    s.max = std::max(a.max, b.max);
    s.min = std::min(a.min, b.min);
  }
  return s;
}

}  // namespace mtrain::profiler
