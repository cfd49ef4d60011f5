#include "tensor/linear.h"

#include <cblas.h>

#include <algorithm>

#include "profiler/kernel_region.h"
#include "tensor/kernel_util.h"

namespace mtrain::kernels {

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C,
                    int64_t OC) {
  profiler::Scope prof(profiler::gemm_kernel("linear_forward", N, OC, C));
  if (profiler::shape_only()) return;
  if (N == 0 || OC == 0) return;
  float beta = 0.0f;
  if (bias != nullptr) {
    // Broadcast the bias into out, then let the GEMM accumulate onto it.
#pragma omp parallel for schedule(static) if (N * OC > 32768)
    for (int64_t i = 0; i < N; ++i) {
      float* row = out + i * OC;
      for (int64_t o = 0; o < OC; ++o) row[o] = bias[o];
    }
    beta = 1.0f;
  }
  // out (N, OC) = inp (N, C) · weight (OC, C)^T. (BLAS wants leading dims >= 1 even when C == 0.)
  const int ldc = static_cast<int>(std::max<int64_t>(1, C));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(N), static_cast<int>(OC), static_cast<int>(C),
              1.0f, inp, ldc, weight, ldc, beta, out, static_cast<int>(OC));
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t C, int64_t OC) {
  const int n = static_cast<int>(N), c = static_cast<int>(C), oc = static_cast<int>(OC);
  const int ldo = std::max(1, oc);
  // A dry run's step passes meta (null) buffers: the GEMM is still reported.
  if ((dinp != nullptr || profiler::shape_only()) && N > 0 && C > 0) {
    // dinp (N, C) = dout (N, OC) · weight (OC, C)
    profiler::Scope prof(profiler::gemm_kernel("linear_backward_dinp", N, C, OC));
    if (!profiler::shape_only())
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, c, oc, 1.0f, dout, ldo, weight, c, 0.0f, dinp, c);
  }
  if (N == 0 || OC == 0) return;
  if (C > 0 && dweight != nullptr) {
    // dweight (OC, C) += dout (N, OC)^T · inp (N, C)
    profiler::Scope prof(profiler::gemm_kernel("linear_backward_dweight", OC, C, N));
    if (!profiler::shape_only())
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, oc, c, n, 1.0f, dout, oc, inp, c, 1.0f, dweight, c);
  }
  if (dbias != nullptr) detail::column_sums_accumulate(dbias, dout, N, OC, OC);
}

void sgemm_nn(float* c, const float* a, const float* b, int64_t M, int64_t N, int64_t K) {
  profiler::Scope prof(profiler::gemm_kernel("sgemm_nn", M, N, K));
  if (profiler::shape_only()) return;
  if (M == 0 || N == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
              1.0f, a, static_cast<int>(std::max<int64_t>(1, K)), b, static_cast<int>(N), 0.0f, c, static_cast<int>(N));
}

}  // namespace mtrain::kernels
