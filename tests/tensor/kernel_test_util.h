// Shared helpers for the kernel tests: seeded random buffers, closeness
// checks that report the worst element, and a central-difference gradient
// checker for a scalar loss L = sum(out * w) evaluated in double.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common/rng.h"

namespace mtrain::kernels::testing {

using Vec = std::vector<float>;

inline Vec randn(int64_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  Vec v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(rng.normal()) * scale;
  return v;
}

inline Vec uniform(int64_t n, uint64_t seed, float lo, float hi) {
  Rng rng(seed);
  Vec v(static_cast<size_t>(n));
  for (auto& x : v) x = lo + static_cast<float>(rng.uniform()) * (hi - lo);
  return v;
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return s;
}

// Every |a - b| <= atol + rtol * max(|a|, |b|); reports the worst index.
inline ::testing::AssertionResult all_close(const Vec& a, const Vec& b, double atol, double rtol) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "size " << a.size() << " vs " << b.size();
  double worst = -1.0;
  size_t wi = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = b[i];
    const double excess = std::fabs(x - y) - (atol + rtol * std::fmax(std::fabs(x), std::fabs(y)));
    if (!(excess <= 0.0) && (std::isnan(excess) || excess > worst)) {
      worst = std::isnan(excess) ? INFINITY : excess;
      wi = i;
    }
  }
  if (worst < 0.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "element " << wi << ": " << a[wi] << " vs " << b[wi] << " (atol " << atol
                                       << ", rtol " << rtol << ")";
}

inline ::testing::AssertionResult bit_equal(const Vec& a, const Vec& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "size mismatch";
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
  return ::testing::AssertionSuccess();
}

struct FdOptions {
  float eps = 1e-2f;
  double atol = 2e-3;
  double rtol = 1e-2;
  int64_t max_coords = -1;  // check a seeded sample of this many coordinates (-1: all)
};

// Compares analytic (d loss / d x) with central differences of loss() while
// perturbing x in place (restored afterwards).
inline ::testing::AssertionResult fd_check(const std::string& name, Vec& x, const Vec& analytic,
                                           const std::function<double()>& loss, FdOptions opt = {}) {
  if (x.size() != analytic.size()) return ::testing::AssertionFailure() << name << ": size mismatch";
  std::vector<size_t> coords;
  const size_t n = x.size();
  if (opt.max_coords < 0 || static_cast<size_t>(opt.max_coords) >= n) {
    for (size_t i = 0; i < n; ++i) coords.push_back(i);
  } else {
    Rng rng(n * 7919 + 17);
    for (int64_t c = 0; c < opt.max_coords; ++c) coords.push_back(rng.next_u64() % n);
  }
  for (size_t i : coords) {
    const float saved = x[i];
    x[i] = saved + opt.eps;
    const double lp = loss();
    x[i] = saved - opt.eps;
    const double lm = loss();
    x[i] = saved;
    const double numeric = (lp - lm) / (2.0 * static_cast<double>(opt.eps));
    const double a = analytic[i];
    if (!(std::fabs(a - numeric) <= opt.atol + opt.rtol * std::fmax(std::fabs(a), std::fabs(numeric))))
      return ::testing::AssertionFailure() << name << "[" << i << "]: analytic " << a << " vs numeric " << numeric;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace mtrain::kernels::testing
