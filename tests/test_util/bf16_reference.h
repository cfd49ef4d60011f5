// bf16 rounding written from its definition, independent of mtrain's
// tensor/precision.h: to nearest with ties to even, 8 significant bits, in
// double. For the references of tests that check where a value is rounded to
// bf16, not how (tests/tensor/test_precision.cc checks the how, bit by bit).
// Normal numbers only: below bf16's smallest normal (2^-126) it keeps more
// bits than bf16's subnormals.
#pragma once

#include <cmath>

namespace mtrain::testing {

inline double bf16_reference(double x) {
  if (x == 0 || !std::isfinite(x)) return x;
  int e = 0;
  std::frexp(x, &e);  // |x| in [2^(e-1), 2^e)
  const double ulp = std::ldexp(1.0, e - 8);
  return std::nearbyint(x / ulp) * ulp;
}

}  // namespace mtrain::testing
