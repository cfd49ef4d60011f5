// Test data for the Comm conformance suites: every rank can regenerate every
// rank's input, so it computes the expected reduction locally, with a plain
// loop in group-rank order, and compares bit for bit.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "common/rng.h"
#include "parallel/comm.h"

namespace mtrain::parallel::testing {

// Rank `rank`'s element i. Floating-point values span many binades, so a sum
// in another order gives other bits (checked in test_sim_comm.cc).
template <class T>
T test_value(uint64_t seed, int rank, int64_t i) {
  const uint64_t s = stream_seed(seed, static_cast<uint64_t>(rank));
  if constexpr (std::is_floating_point_v<T>) {
    const int spread = std::is_same_v<T, float> ? 12 : 40;
    const double mantissa = 2.0 * uniform01(s, 2 * i) - 1.0;
    const int exponent = static_cast<int>(uniform01(s, 2 * i + 1) * (2 * spread + 1)) - spread;
    return static_cast<T>(std::ldexp(mantissa, exponent));
  } else {
    return static_cast<T>(static_cast<int64_t>(mix64(s ^ static_cast<uint64_t>(i)) % 2001) - 1000);
  }
}

template <class T>
std::vector<T> test_values(uint64_t seed, int rank, int64_t n, int64_t first = 0) {
  std::vector<T> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = test_value<T>(seed, rank, first + i);
  return v;
}

// The reduction of element i over `size` ranks, folded in group-rank order.
template <class T>
T expected_reduce(uint64_t seed, int size, int64_t i, ReduceOp op) {
  T acc = test_value<T>(seed, 0, i);
  for (int k = 1; k < size; ++k) {
    const T x = test_value<T>(seed, k, i);
    if (op == ReduceOp::kSum) acc = static_cast<T>(acc + x);
    if (op == ReduceOp::kMax) acc = x > acc ? x : acc;
    if (op == ReduceOp::kMin) acc = x < acc ? x : acc;
  }
  return acc;
}

template <class T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Number of elements whose bits differ from the expected reduction.
template <class T>
int64_t count_reduce_mismatches(const T* got, uint64_t seed, int size, int64_t first, int64_t n, ReduceOp op) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += !same_bits(got[i], expected_reduce<T>(seed, size, first + i, op));
  return bad;
}

}  // namespace mtrain::parallel::testing
