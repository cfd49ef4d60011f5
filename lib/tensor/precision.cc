#include "tensor/precision.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "profiler/kernel_region.h"

namespace mtrain::kernels {
namespace {

constexpr int64_t kParallelMin = 16384;
constexpr uint32_t kAbsMask = 0x7fffffffu;
constexpr uint32_t kInfBits = 0x7f800000u;

}  // namespace

float round_bf16(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & kAbsMask) > kInfBits) return std::bit_cast<float>(u | 0x00400000u);  // NaN: keep it (quiet)
  // Round to nearest, ties to even, on the 16 bits that are dropped; a carry
  // into the exponent is the correct result (up to inf on overflow).
  u += 0x7fffu + ((u >> 16) & 1u);
  return std::bit_cast<float>(u & 0xffff0000u);
}

float round_fp16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t a = u & kAbsMask;
  if (a > kInfBits) return x;  // NaN stays NaN
  // 65520 = 65504 + half an ulp; the tie rounds to the even neighbour 2^16, i.e. overflows.
  if (a >= 0x477ff000u) return std::copysign(INFINITY, x);
  if (a < 0x38800000u) {
    // Below 2^-14 fp16 is subnormal with a fixed quantum of 2^-24: scale (exact),
    // round to an integer (the default rounding mode is nearest-even), scale back.
    const float q = std::nearbyint(std::fabs(x) * 16777216.0f) * (1.0f / 16777216.0f);
    return std::copysign(q, x);
  }
  // Normal range: keep 10 of the 23 mantissa bits, nearest-even.
  const uint32_t r = (u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u;
  return std::bit_cast<float>(r);
}

void round_to_dtype(float* x, int64_t n, DType dtype) {
  if (profiler::shape_only()) return;  // a dry run's step: no data
  if (dtype == DType::kF32) return;
  if (dtype == DType::kBF16) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
  } else {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) x[i] = round_fp16(x[i]);
  }
}

double sum_squares(const float* x, int64_t n) {
  if (profiler::shape_only()) return 0.0;  // a dry run's step: no data
  // Fixed chunks, each summed in order, then the chunk sums in order: the
  // same bits for any thread count.
  constexpr int64_t kChunk = 1 << 16;
  const int64_t nchunks = (n + kChunk - 1) / kChunk;
  if (nchunks <= 1) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    return s;
  }
  std::vector<double> partial(nchunks);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < nchunks; ++c) {
    const int64_t i0 = c * kChunk, i1 = std::min(n, i0 + kChunk);
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = i0; i < i1; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    partial[c] = s;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

bool all_finite(const float* x, int64_t n) {
  if (profiler::shape_only()) return true;  // a dry run's step: no data
  int64_t bad = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : bad) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) bad += (std::bit_cast<uint32_t>(x[i]) & kInfBits) == kInfBits ? 1 : 0;
  return bad == 0;
}

}  // namespace mtrain::kernels
