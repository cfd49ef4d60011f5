// Internal helpers shared by the kernel .cc files of lib/tensor (not part of
// the public kernel contract): deterministic column sums, the dropout mask,
// a vectorisable exp for softmax arguments.
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

// Dropout multiplier of element `index`: 0 if dropped, 1/(1-p) if kept.
// Callers skip the call entirely when p == 0 (exact identity).
inline float dropout_multiplier(uint64_t seed, uint64_t index, float p, float keep_scale) {
  return uniform01(seed, index) >= p ? keep_scale : 0.0f;
}

// 1/(1-p); 0 when p >= 1 (everything dropped).
inline float dropout_keep_scale(float p) { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }

// Flattened (b, h, tq, tk) dropout index shared by the unfused and flash paths.
inline uint64_t attention_dropout_index(int64_t b, int64_t h, int64_t H, int64_t T, int64_t tq, int64_t tk) {
  return static_cast<uint64_t>(((b * H + h) * T + tq) * T + tk);
}

}  // namespace mtrain::kernels::detail
