#include "lora/lora_kernels.h"

#include <cblas.h>

#include <algorithm>

#include "common/rng.h"
#include "profiler/kernel_region.h"

namespace mtrain::lora {

namespace {

constexpr int64_t kParallelMin = 32768;  // elements below which an OpenMP region costs more than it saves

int ld(int64_t n) { return static_cast<int>(std::max<int64_t>(1, n)); }

// The counter of element (n, 0) of the block.
inline uint64_t row_index(const DropoutSite& d, int64_t n) {
  const int64_t token = d.row_ids ? d.row_ids[n] : numbered_token(d.tokens, n);
  return static_cast<uint64_t>(token * d.row_stride + d.col0);
}

// The dropout multiplier of the element at counter `index`: 0 if dropped,
// 1/(1-p) if kept (the rule of the other dropouts, tensor/kernel_util.h).
inline float keep(const DropoutSite& d, int64_t n, uint64_t index, float keep_scale) {
  return uniform01(d.row_seeds ? d.row_seeds[n] : d.seed, index) >= d.p ? keep_scale : 0.0f;
}

float keep_scale(float p) { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }

// out (N, IN) = x ⊙ mask (or out *= mask when out == x).
void apply_mask(float* out, const float* x, int64_t N, int64_t IN, const DropoutSite& d) {
  const float ks = keep_scale(d.p);
#pragma omp parallel for schedule(static) if (N * IN > kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const uint64_t base = row_index(d, n);
    for (int64_t j = 0; j < IN; ++j) out[n * IN + j] = x[n * IN + j] * keep(d, n, base + j, ks);
  }
}

}  // namespace

void lora_down_forward(float* h, float* scratch, const float* x, const float* A, int64_t N, int64_t IN, int64_t r,
                       const DropoutSite& d) {
  profiler::Scope prof(profiler::gemm_kernel("lora_down_forward", N, r, IN));
  if (profiler::shape_only() || N == 0 || r == 0) return;
  const float* in = x;
  if (d.p > 0.f) {
    apply_mask(scratch, x, N, IN, d);
    in = scratch;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(N), static_cast<int>(r), static_cast<int>(IN),
              1.0f, in, ld(IN), A, ld(IN), 0.0f, h, static_cast<int>(r));
}

void lora_up_forward(float* y, const float* h, const float* B, float scale, int64_t N, int64_t r, int64_t OUT) {
  profiler::Scope prof(profiler::gemm_kernel("lora_up_forward", N, OUT, r));
  if (profiler::shape_only() || N == 0 || OUT == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(N), static_cast<int>(OUT), static_cast<int>(r),
              scale, h, ld(r), B, ld(r), 1.0f, y, static_cast<int>(OUT));
}

void lora_up_backward(float* dh, float* dB, const float* dy, const float* h, const float* B, float scale, int64_t N,
                      int64_t r, int64_t OUT) {
  profiler::Scope prof(profiler::gemm_kernel("lora_up_backward", N, r, 2 * OUT));
  if (profiler::shape_only() || N == 0 || r == 0) return;
  // dh (N, r) = scale · dy (N, OUT) · B (OUT, r)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(N), static_cast<int>(r),
              static_cast<int>(OUT), scale, dy, ld(OUT), B, static_cast<int>(r), 0.0f, dh, static_cast<int>(r));
  // dB (OUT, r) += scale · dy^T (OUT, N) · h (N, r)
  if (dB != nullptr && OUT > 0)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(OUT), static_cast<int>(r),
                static_cast<int>(N), scale, dy, ld(OUT), h, static_cast<int>(r), 1.0f, dB, static_cast<int>(r));
}

void lora_down_backward(float* dx, float* dA, const float* dh, const float* x, const float* A, float* scratch,
                        int64_t N, int64_t IN, int64_t r, const DropoutSite& d) {
  profiler::Scope prof(profiler::gemm_kernel("lora_down_backward", N, IN, 2 * r));
  if (profiler::shape_only() || N == 0 || IN == 0) return;
  if (dA != nullptr && r > 0) {
    const float* in = x;  // dropout(x), regenerated from the counter-based mask
    if (d.p > 0.f) {
      apply_mask(scratch, x, N, IN, d);
      in = scratch;
    }
    // dA (r, IN) += dh^T (r, N) · in (N, IN)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(r), static_cast<int>(IN), static_cast<int>(N),
                1.0f, dh, ld(r), in, ld(IN), 1.0f, dA, ld(IN));
  }
  if (dx == nullptr) return;
  if (d.p == 0.f) {  // dx (N, IN) += dh (N, r) · A (r, IN)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(N), static_cast<int>(IN),
                static_cast<int>(r), 1.0f, dh, ld(r), A, ld(IN), 1.0f, dx, ld(IN));
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(N), static_cast<int>(IN), static_cast<int>(r),
              1.0f, dh, ld(r), A, ld(IN), 0.0f, scratch, ld(IN));
  const float ks = keep_scale(d.p);
#pragma omp parallel for schedule(static) if (N * IN > kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const uint64_t base = row_index(d, n);
    for (int64_t j = 0; j < IN; ++j) dx[n * IN + j] += scratch[n * IN + j] * keep(d, n, base + j, ks);
  }
}

}  // namespace mtrain::lora
