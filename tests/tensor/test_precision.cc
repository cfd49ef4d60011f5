// bf16 / fp16 rounding (round-to-nearest-even, overflow, subnormals, NaN),
// sum_squares and all_finite.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/rng.h"
#include "tensor/precision.h"

namespace mtrain::kernels {
namespace {

float from_bits(uint32_t u) { return std::bit_cast<float>(u); }
uint32_t to_bits(float f) { return std::bit_cast<uint32_t>(f); }

TEST(RoundBf16, KnownValues) {
  EXPECT_EQ(round_bf16(1.0f), 1.0f);
  EXPECT_EQ(round_bf16(1.00390625f), 1.0f);                              // 1 + 2^-8: tie, 1.0 is even
  EXPECT_EQ(round_bf16(1.01171875f), 1.015625f);                         // 1 + 3*2^-8: tie, rounds up to even
  EXPECT_EQ(round_bf16(std::nextafter(1.00390625f, 2.0f)), 1.0078125f);  // just past the tie
  EXPECT_EQ(round_bf16(-1.00390625f), -1.0f);
  EXPECT_EQ(round_bf16(3.14159265f), 3.140625f);
  EXPECT_EQ(round_bf16(FLT_MAX), INFINITY);                               // past the largest bf16: overflows under RNE
  EXPECT_EQ(round_bf16(from_bits(0x7f7f0000u)), from_bits(0x7f7f0000u));  // largest bf16 is exact
  EXPECT_EQ(round_bf16(INFINITY), INFINITY);
  EXPECT_EQ(round_bf16(-INFINITY), -INFINITY);
  EXPECT_TRUE(std::isnan(round_bf16(NAN)));
  EXPECT_TRUE(std::isnan(round_bf16(from_bits(0x7f800001u))));  // payload only in the dropped bits
  EXPECT_TRUE(std::isnan(round_bf16(from_bits(0xffffffffu))));
  EXPECT_TRUE(std::signbit(round_bf16(-0.0f)));
}

TEST(RoundFp16, KnownValues) {
  EXPECT_EQ(round_fp16(1.0f), 1.0f);
  EXPECT_EQ(round_fp16(1.0f + 0x1p-11f), 1.0f);                // tie, 1.0 is even
  EXPECT_EQ(round_fp16(1.0f + 3 * 0x1p-11f), 1.0f + 0x1p-9f);  // tie, rounds up to even
  EXPECT_EQ(round_fp16(65504.0f), 65504.0f);                   // fp16 max
  EXPECT_EQ(round_fp16(65519.0f), 65504.0f);
  EXPECT_EQ(round_fp16(std::nextafter(65520.0f, 0.0f)), 65504.0f);
  EXPECT_EQ(round_fp16(65520.0f), INFINITY);  // the tie above the max rounds to inf
  EXPECT_EQ(round_fp16(-65520.0f), -INFINITY);
  EXPECT_EQ(round_fp16(1e10f), INFINITY);
  EXPECT_EQ(round_fp16(0x1p-14f), 0x1p-14f);  // smallest normal
  EXPECT_EQ(round_fp16(0x1p-24f), 0x1p-24f);  // smallest subnormal
  EXPECT_EQ(round_fp16(0x1p-25f), 0.0f);      // tie between 0 and 2^-24: 0 is even
  EXPECT_EQ(round_fp16(std::nextafter(0x1p-25f, 1.0f)), 0x1p-24f);
  EXPECT_EQ(round_fp16(3 * 0x1p-25f), 0x1p-23f);  // tie between 1 and 2 quanta: 2 is even
  EXPECT_EQ(round_fp16(5 * 0x1p-26f), 0x1p-24f);  // 1.25 quanta
  EXPECT_EQ(round_fp16(0x1p-30f), 0.0f);
  EXPECT_TRUE(std::signbit(round_fp16(-0x1p-30f)));                 // underflow keeps the sign
  EXPECT_EQ(round_fp16(std::nextafter(0x1p-14f, 0.0f)), 0x1p-14f);  // top subnormal rounds up to the normal
  EXPECT_EQ(round_fp16(INFINITY), INFINITY);
  EXPECT_EQ(round_fp16(-INFINITY), -INFINITY);
  EXPECT_TRUE(std::isnan(round_fp16(NAN)));
  EXPECT_TRUE(std::isnan(round_fp16(from_bits(0x7f800001u))));
}

// Independent reference: the two representable neighbours of x on a grid of
// `keep` mantissa bits and quantum floor `min_quantum`, nearest wins, ties to
// an even multiple of the quantum. Works in double.
double round_reference(double x, int keep_bits, int min_exp, double max_finite) {
  if (std::isnan(x) || std::isinf(x) || x == 0.0) return x;
  const double a = std::fabs(x);
  int e;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  const int exp = std::max(e - 1, min_exp);
  const double quantum = std::ldexp(1.0, exp - keep_bits);
  const double lo = std::floor(a / quantum) * quantum, hi = lo + quantum;
  double r;
  if (a - lo < hi - a)
    r = lo;
  else if (a - lo > hi - a)
    r = hi;
  else
    r = std::fmod(lo / quantum, 2.0) == 0.0 ? lo : hi;
  const double overflow = max_finite + 0.5 * std::ldexp(1.0, static_cast<int>(std::log2(max_finite)) - keep_bits);
  if (a >= overflow) r = INFINITY;
  return std::copysign(r, x);
}

TEST(RoundFp16, MatchesReferenceOnRandomBitPatterns) {
  Rng rng(7);
  for (int i = 0; i < 200000; ++i) {
    // Bias exponents toward the fp16 range so subnormals and overflow are hit often.
    uint32_t u = static_cast<uint32_t>(rng.next_u64());
    if (i % 2) u = (u & 0x807fffffu) | ((100u + static_cast<uint32_t>(rng.next_u64() % 48u)) << 23);
    const float x = from_bits(u);
    const float got = round_fp16(x);
    const double want = round_reference(x, 10, -14, 65504.0);
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(got));
      continue;
    }
    ASSERT_EQ(static_cast<double>(got), want) << std::hexfloat << x;
#if defined(__FLT16_MAX__)
    ASSERT_EQ(got, static_cast<float>(static_cast<_Float16>(x))) << std::hexfloat << x;
#endif
  }
}

TEST(RoundBf16, MatchesReferenceOnRandomBitPatterns) {
  Rng rng(8);
  for (int i = 0; i < 200000; ++i) {
    const float x = from_bits(static_cast<uint32_t>(rng.next_u64()));
    const float got = round_bf16(x);
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(got));
      continue;
    }
    ASSERT_EQ(to_bits(got) & 0xffffu, 0u);
    ASSERT_EQ(static_cast<double>(got), round_reference(x, 7, -126, static_cast<double>(from_bits(0x7f7f0000u))))
        << std::hexfloat << x;
  }
}

TEST(RoundToDtype, ElementwiseAndNoOpForF32) {
  std::vector<float> x(50000), y;
  Rng rng(9);
  for (auto& v : x) v = static_cast<float>(rng.normal() * 1000.0);
  x[17] = 70000.0f;
  y = x;
  round_to_dtype(y.data(), static_cast<int64_t>(y.size()), DType::kF32);
  EXPECT_EQ(y, x);
  round_to_dtype(y.data(), static_cast<int64_t>(y.size()), DType::kF16);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(to_bits(y[i]), to_bits(round_fp16(x[i]))) << i;
  EXPECT_EQ(y[17], INFINITY);
  y = x;
  round_to_dtype(y.data(), static_cast<int64_t>(y.size()), DType::kBF16);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(to_bits(y[i]), to_bits(round_bf16(x[i]))) << i;
}

TEST(SumSquares, ValuesAndDeterminism) {
  const float small[] = {1.0f, 2.0f, 3.0f};
  EXPECT_EQ(sum_squares(small, 3), 14.0);
  EXPECT_EQ(sum_squares(small, 0), 0.0);
  const int64_t n = 1000003;  // several chunks plus a ragged tail
  std::vector<float> x(n);
  Rng rng(10);
  double ref = 0.0;
  for (auto& v : x) {
    v = static_cast<float>(rng.normal());
    ref += static_cast<double>(v) * v;
  }
  const double got = sum_squares(x.data(), n);
  EXPECT_NEAR(got, ref, 1e-9 * ref);
  EXPECT_EQ(got, sum_squares(x.data(), n));  // bit-identical on a rerun
  std::vector<float> big(n, 0x1p66f);        // squares would overflow in float, not in double
  EXPECT_EQ(sum_squares(big.data(), n), 0x1p132 * static_cast<double>(n));
}

TEST(AllFinite, DetectsNanAndInfAnywhere) {
  std::vector<float> x(100000, 1.0f);
  x[5] = FLT_MAX;
  x[6] = -0.0f;
  x[7] = 1e-45f;  // a subnormal is finite
  EXPECT_TRUE(all_finite(x.data(), static_cast<int64_t>(x.size())));
  for (size_t pos : {size_t{0}, size_t{12345}, x.size() - 1})
    for (float bad : {NAN, INFINITY, -INFINITY}) {
      std::vector<float> y = x;
      y[pos] = bad;
      EXPECT_FALSE(all_finite(y.data(), static_cast<int64_t>(y.size()))) << pos << " " << bad;
      EXPECT_TRUE(all_finite(y.data(), static_cast<int64_t>(pos)));  // only the prefix before it
    }
  EXPECT_TRUE(all_finite(x.data(), 0));
}

}  // namespace
}  // namespace mtrain::kernels
