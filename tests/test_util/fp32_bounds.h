// Tolerances for fp32 results that hold on any CPU, BLAS kernel, thread count
// and FMA contraction: they are derived from the computation, never measured
// on one machine (docs/DESIGN-NOTES.md, "Tolerances").
//
// The basic fact (Higham, "Accuracy and Stability of Numerical Algorithms",
// ch. 3): a k-term sum or dot product evaluated in fp32 in ANY order, with or
// without FMA, satisfies |computed - exact| <= gamma(k) * sum|terms|, where
// gamma(k) = k*u / (1 - k*u) and u = 2^-24. An element whose terms cancel can
// therefore differ between two summation orders by far more than its own
// size times u; bound it by its terms, or compare whole tensors in a norm.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace mtrain::testing {

inline constexpr double kFp32Unit = 0x1p-24;  // unit roundoff of fp32

// Higham's gamma_k for fp32.
inline double fp32_gamma(int64_t k) {
  const double ku = static_cast<double>(k) * kFp32Unit;
  return ku / (1.0 - ku);
}

// Every |a[i] - b[i]| <= bound[i]; reports the element with the largest ratio.
inline ::testing::AssertionResult within_bounds(const std::vector<float>& a, const std::vector<float>& b,
                                                const std::vector<double>& bound) {
  if (a.size() != b.size() || a.size() != bound.size())
    return ::testing::AssertionFailure() << "sizes " << a.size() << ", " << b.size() << ", " << bound.size();
  size_t worst = 0;
  double worst_ratio = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (diff <= bound[i]) continue;  // also exact zeros with a zero bound
    const double ratio = std::isnan(diff) ? INFINITY : diff / bound[i];
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  if (worst_ratio <= 1.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "element " << worst << ": " << a[worst] << " vs " << b[worst] << " differ by "
                                       << std::fabs(static_cast<double>(a[worst]) - b[worst]) << ", bound "
                                       << bound[worst];
}

// max_i |a[i] - b[i]| <= rtol * max_i |b[i]|: closeness of whole tensors in
// the max norm, for results whose elements may cancel (gradients).
inline ::testing::AssertionResult close_in_max_norm(const float* a, const float* b, size_t n, double rtol) {
  double diff = 0.0, scale = 0.0;
  size_t worst = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (!(d <= diff)) {
      diff = std::isnan(d) ? INFINITY : d;
      worst = i;
    }
    scale = std::fmax(scale, std::fabs(static_cast<double>(b[i])));
  }
  if (diff <= rtol * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max |a - b| = " << diff << " at element " << worst << " (" << a[worst]
                                       << " vs " << b[worst] << ") > " << rtol << " * max |b| = " << rtol * scale;
}

}  // namespace mtrain::testing
