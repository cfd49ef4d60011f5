// The adapter kernels (lib/lora/lora_kernels.h) against an fp64 reference of
// PEFT's math, h = dropout(x) A^T, y += s h B^T and their gradients, with
// bounds derived from the sums (test_util/fp32_bounds.h); and the dropout
// numbering: a token's mask does not depend on how far its sequence was
// padded, nor on which token or column shard computes it.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/rng.h"
#include "lora/lora_kernels.h"
#include "lora_test_util.h"
#include "test_util/fp32_bounds.h"

namespace mtrain::lora {
namespace {

using mtrain::testing::fp32_gamma;
using mtrain::testing::within_bounds;

std::vector<float> random(int64_t n, uint64_t seed) { return testing::random_uniform(n, seed); }

// The mask as a 0/1 matrix (N, IN), from the kernel itself: dropout(ones) * (1 - p).
std::vector<float> mask_of(const DropoutSite& d, int64_t N, int64_t IN) {
  std::vector<float> ones(N * IN, 1.f), out(N * IN), h(N), A(IN, 1.f);
  std::vector<float> scratch(N * IN);  // the forward leaves dropout(x) here
  lora_down_forward(h.data(), scratch.data(), ones.data(), A.data(), N, IN, 1, d);
  for (int64_t e = 0; e < N * IN; ++e) out[e] = scratch[e] * (1 - d.p);
  return out;
}

TEST(LoraKernels, MatchAnFp64ReferenceWithDropout) {
  const int64_t N = 12, IN = 20, r = 3, OUT = 7;
  const float s = 2.5f;
  const DropoutSite d{0.3f, 99, IN, 0, {}};
  const auto x = random(N * IN, 1), A = random(r * IN, 2), B = random(OUT * r, 3), dy = random(N * OUT, 4);
  const std::vector<float> m = mask_of(d, N, IN);
  const double ks = 1.0 / (1 - d.p);
  std::vector<float> h(N * r), scratch(N * IN), y(N * OUT, 0.5f);
  lora_down_forward(h.data(), scratch.data(), x.data(), A.data(), N, IN, r, d);
  lora_up_forward(y.data(), h.data(), B.data(), s, N, r, OUT);
  std::vector<float> dh(N * r), dA(r * IN, 0.f), dB(OUT * r, 0.f), dx(N * IN, 0.f);
  lora_up_backward(dh.data(), dB.data(), dy.data(), h.data(), B.data(), s, N, r, OUT);
  lora_down_backward(dx.data(), dA.data(), dh.data(), x.data(), A.data(), scratch.data(), N, IN, r, d);

  // fp64 reference. Bound: a k-term fp32 dot product is within gamma(k) * sum |terms|
  // in any order (Higham); a result that chains two of them (y through h, dA
  // and dx through dh) is within gamma(k1 + k2 + 2) of the sum of the absolute
  // products (the +2: the scale and the mask multiply); times 2 for the
  // first-order terms dropped.
  std::vector<double> hr(N * r), habs(N * r), dhr(N * r), dhabs(N * r);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < r; ++k)
      for (int64_t j = 0; j < IN; ++j) {
        const double t = x[n * IN + j] * m[n * IN + j] * ks * A[k * IN + j];
        hr[n * r + k] += t, habs[n * r + k] += std::abs(t);
      }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < r; ++k)
      for (int64_t o = 0; o < OUT; ++o) {
        const double t = s * dy[n * OUT + o] * B[o * r + k];
        dhr[n * r + k] += t, dhabs[n * r + k] += std::abs(t);
      }
  const double g = fp32_gamma(IN + OUT + 2);
  std::vector<float> yr(N * OUT), dBr(OUT * r), dAr(r * IN), dxr(N * IN);
  std::vector<double> yb(N * OUT), dBb(OUT * r), dAb(r * IN), dxb(N * IN);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OUT; ++o) {
      double v = 0.5, a = 0.5;
      for (int64_t k = 0; k < r; ++k)
        v += s * hr[n * r + k] * B[o * r + k], a += s * habs[n * r + k] * std::abs(B[o * r + k]);
      yr[n * OUT + o] = static_cast<float>(v), yb[n * OUT + o] = 2 * g * a;
    }
  for (int64_t o = 0; o < OUT; ++o)
    for (int64_t k = 0; k < r; ++k) {
      double v = 0, a = 0;
      for (int64_t n = 0; n < N; ++n)
        v += s * dy[n * OUT + o] * hr[n * r + k], a += s * std::abs(dy[n * OUT + o]) * habs[n * r + k];
      dBr[o * r + k] = static_cast<float>(v), dBb[o * r + k] = fp32_gamma(N + IN + 2) * 2 * a;
    }
  for (int64_t k = 0; k < r; ++k)
    for (int64_t j = 0; j < IN; ++j) {
      double v = 0, a = 0;
      for (int64_t n = 0; n < N; ++n) {
        const double xd = x[n * IN + j] * m[n * IN + j] * ks;
        v += dhr[n * r + k] * xd, a += dhabs[n * r + k] * std::abs(xd);
      }
      dAr[k * IN + j] = static_cast<float>(v), dAb[k * IN + j] = fp32_gamma(N + OUT + 2) * 2 * a;
    }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < IN; ++j) {
      double v = 0, a = 0;
      for (int64_t k = 0; k < r; ++k)
        v += dhr[n * r + k] * A[k * IN + j], a += dhabs[n * r + k] * std::abs(A[k * IN + j]);
      dxr[n * IN + j] = static_cast<float>(v * m[n * IN + j] * ks),
                   dxb[n * IN + j] = fp32_gamma(r + OUT + 2) * 2 * a * ks;
    }
  EXPECT_TRUE(within_bounds(y, yr, yb));
  EXPECT_TRUE(within_bounds(dB, dBr, dBb));
  EXPECT_TRUE(within_bounds(dA, dAr, dAb));
  EXPECT_TRUE(within_bounds(dx, dxr, dxb));
  int dropped = 0;
  for (float v : m) dropped += v == 0.f;
  EXPECT_GT(dropped, N * IN / 6);  // p = 0.3: the mask really drops
  EXPECT_LT(dropped, N * IN / 2);
}

TEST(LoraKernels, MaskOfATokenIgnoresPaddingAndShards) {
  const int64_t IN = 8, pitch = 16;
  // Two sequences of 5 tokens, and the same padded to 6 (sequence parallelism at TP 2 or 3).
  const auto a = mask_of({0.5f, 7, IN, 0, {0, 5, pitch}}, 10, IN);
  const auto b = mask_of({0.5f, 7, IN, 0, {0, 6, pitch}}, 12, IN);
  for (int64_t seq = 0; seq < 2; ++seq)
    for (int64_t t = 0; t < 5; ++t)
      for (int64_t j = 0; j < IN; ++j)
        ASSERT_EQ(a[(seq * 5 + t) * IN + j], b[(seq * 6 + t) * IN + j]) << "sequence " << seq << " token " << t;
  // Tokens 6.. of the padded batch as a token shard (row0 = 6), and input columns 4.. as a column shard.
  const auto rows = mask_of({0.5f, 7, IN, 0, {6, 6, pitch}}, 6, IN);
  for (int64_t e = 0; e < 6 * IN; ++e) ASSERT_EQ(rows[e], b[6 * IN + e]);
  const auto cols = mask_of({0.5f, 7, IN, 4, {0, 6, pitch}}, 12, IN / 2);
  for (int64_t n = 0; n < 12; ++n)
    for (int64_t j = 0; j < IN / 2; ++j) ASSERT_EQ(cols[n * (IN / 2) + j], b[n * IN + 4 + j]);
}

// Context parallelism: CP rank r of 2 holds chunks r and 3-r (2 tokens each)
// of every 8-token sequence; its rows draw those tokens' masks of the whole
// batch, also as a column shard (a row-parallel adapter's input).
TEST(LoraKernels, MaskOfAContextParallelRankIsItsSliceOfTheWholeMask) {
  const int64_t IN = 8, T = 8, B = 2, P = 2, c = T / (2 * P);
  const auto whole = mask_of({0.5f, 7, IN, 0, {0, T, T}}, B * T, IN);
  for (int64_t r = 0; r < P; ++r) {
    const auto mine = mask_of({0.5f, 7, IN, 0, {0, T / P, T, P, r}}, B * T / P, IN);
    const auto cols = mask_of({0.5f, 7, IN, 4, {0, T / P, T, P, r}}, B * T / P, IN / 2);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T / P; ++t) {
        const int64_t pos = (t < c ? r : 2 * P - 1 - r) * c + t % c, n = b * T / P + t;
        for (int64_t j = 0; j < IN; ++j)
          ASSERT_EQ(mine[n * IN + j], whole[(b * T + pos) * IN + j]) << "rank " << r << " b " << b << " t " << t;
        for (int64_t j = 0; j < IN / 2; ++j) ASSERT_EQ(cols[n * (IN / 2) + j], whole[(b * T + pos) * IN + 4 + j]);
      }
  }
}

}  // namespace
}  // namespace mtrain::lora
