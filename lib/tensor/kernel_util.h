// Internal helpers shared by the kernel .cc files of lib/tensor (not part of
// the public kernel contract): deterministic column sums, the dropout mask,
// a vectorisable exp for softmax arguments. lib/parallel's vocab-parallel
// cross-entropy uses softmax_exp too, so it matches kernels::cross_entropy.
#pragma once

#include <bit>
#include <cstdint>

#include "common/rng.h"

namespace mtrain::kernels::detail {

// dst (C) += column sums of src (N rows, C columns, row stride ld). Each
// thread owns a block of columns and walks the rows in order, so the result
// is bit-identical whatever the thread count.
void column_sums_accumulate(float* dst, const float* src, int64_t N, int64_t C, int64_t ld);

// exp for softmax-family arguments (x - max, x - lse): x <= 80. Written with
// plain float ops and bit tricks so loops over it vectorise (libm's expf does
// not without -ffast-math). x = n*ln2 + r with |r| <= ln2/2, exp(r) by its
// degree-7 Taylor polynomial (truncation < 1e-8 relative), times 2^n built in
// the exponent bits. Within ~2 ulp of expf; returns exactly 0 below -87.3 (no
// subnormals) and for -inf; NaN stays NaN.
inline float softmax_exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;  // ln 2 split so n * kLn2Hi is exact
  constexpr float kLn2Lo = 1.42860682030941723e-6f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer (nearest-even)
  const float xc = x < -87.5f ? -87.5f : (x > 80.0f ? 80.0f : x);
  const float t = xc * kLog2e + kRound;
  const float n = t - kRound;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t ni = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound);
  const float scale = std::bit_cast<float>(static_cast<uint32_t>(ni + 127) << 23);
  return x < -87.3f ? 0.0f : p * scale;
}

// tanh in plain float ops so activation loops vectorise (libm's tanhf does
// not; it dominated the GELU kernels). Cephes' tanhf scheme: an odd
// polynomial for |x| < 0.625 (relative error ~1e-7), else 1 - 2/(e^{2|x|}+1)
// with softmax_exp (absolute error ~1e-7; exactly +-1 for |x| >= ~9.1, and
// 2|x| > 80 is clamped, which still rounds to +-1). NaN stays NaN.
inline float vec_tanh(float x) {
  const float ax = x < 0.0f ? -x : x;
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float big = 1.0f - 2.0f / (softmax_exp(2.0f * ax) + 1.0f);
  return ax < 0.625f ? small : (x < 0.0f ? -big : big);
}

// Logistic sigmoid 1/(1+e^-x) through softmax_exp: within a few ulp of the
// libm formula for x >= -80; below that it returns ~1.8e-35 instead of
// e^x (both negligible next to 1).
inline float vec_sigmoid(float x) { return 1.0f / (1.0f + softmax_exp(-x)); }

// Dropout multiplier of element `index`: 0 if dropped, 1/(1-p) if kept.
// Callers skip the call entirely when p == 0 (exact identity).
inline float dropout_multiplier(uint64_t seed, uint64_t index, float p, float keep_scale) {
  return uniform01(seed, index) >= p ? keep_scale : 0.0f;
}

// 1/(1-p); 0 when p >= 1 (everything dropped).
inline float dropout_keep_scale(float p) { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }

// Where attention masks are numbered: `heads` heads per sequence and `pitch`
// positions per sequence (the longest a sequence may be, not the batch's
// padded length), so neither head sharding nor padding moves a mask.
struct AttentionMask {
  int64_t heads = 0;
  int64_t pitch = 0;
};

// Flattened (b, h, tq, tk) dropout index shared by the unfused and flash paths.
inline uint64_t attention_dropout_index(int64_t b, int64_t h, const AttentionMask& m, int64_t tq, int64_t tk) {
  return static_cast<uint64_t>(((b * m.heads + h) * m.pitch + tq) * m.pitch + tk);
}

// The head count H of attention_dropout_index for a call on H local heads
// that are heads [head_offset, head_offset + H) of total_heads (0 = H).
// Throws Error(kInternal) when the local heads do not fit.
int64_t attention_dropout_heads(int64_t H, int64_t head_offset, int64_t total_heads);

}  // namespace mtrain::kernels::detail
