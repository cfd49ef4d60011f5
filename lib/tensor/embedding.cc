#include "tensor/embedding.h"

#include <algorithm>

#include "profiler/kernel_region.h"

namespace mtrain::kernels {

void embedding_forward(float* out, const int32_t* tokens, const int32_t* positions, const float* wte, const float* wpe,
                       int64_t N, int64_t C) {
  profiler::Scope prof(profiler::elementwise_kernel("embedding_forward", 3.0 * N * C + 2.0 * N, 1.0 * N * C));
  if (profiler::shape_only()) return;
#pragma omp parallel for schedule(static) if (N * C > 16384)
  for (int64_t i = 0; i < N; ++i) {
    const float* te = wte + static_cast<int64_t>(tokens[i]) * C;
    float* o = out + i * C;
    if (wpe) {
      const float* pe = wpe + static_cast<int64_t>(positions[i]) * C;
      for (int64_t j = 0; j < C; ++j) o[j] = te[j] + pe[j];
    } else {
      for (int64_t j = 0; j < C; ++j) o[j] = te[j];
    }
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, const int32_t* positions,
                        int64_t N, int64_t C) {
  profiler::Scope prof(profiler::elementwise_kernel("embedding_backward", 4.0 * N * C + 2.0 * N, 2.0 * N * C));
  if (profiler::shape_only()) return;
  // Each task owns a block of the C columns of every table row and scatters
  // the rows of dout in order: no races, and the same summation order for any
  // thread count (repeated tokens add up in token order).
  constexpr int64_t kBlock = 64;
  const int64_t nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (N * C > 16384)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kBlock, nc = std::min(C, c0 + kBlock) - c0;
    for (int64_t i = 0; i < N; ++i) {
      const float* g = dout + i * C + c0;
      float* te = dwte + static_cast<int64_t>(tokens[i]) * C + c0;
      for (int64_t j = 0; j < nc; ++j) te[j] += g[j];
      if (dwpe) {
        float* pe = dwpe + static_cast<int64_t>(positions[i]) * C + c0;
        for (int64_t j = 0; j < nc; ++j) pe[j] += g[j];
      }
    }
  }
}

}  // namespace mtrain::kernels
