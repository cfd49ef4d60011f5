#include "tensor/kernel_util.h"

#include <algorithm>

namespace mtrain::kernels::detail {

void column_sums_accumulate(float* dst, const float* src, int64_t N, int64_t C, int64_t ld) {
  constexpr int64_t kBlock = 256;  // columns per task: 1 KiB of dst stays in L1
  const int64_t nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (N * C > 32768)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kBlock;
    const int64_t c1 = std::min(C, c0 + kBlock);
    float acc[kBlock];
    for (int64_t j = 0; j < c1 - c0; ++j) acc[j] = 0.0f;
    for (int64_t i = 0; i < N; ++i) {
      const float* row = src + i * ld + c0;
      for (int64_t j = 0; j < c1 - c0; ++j) acc[j] += row[j];
    }
    for (int64_t j = 0; j < c1 - c0; ++j) dst[c0 + j] += acc[j];
  }
}

}  // namespace mtrain::kernels::detail
