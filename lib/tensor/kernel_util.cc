#include "tensor/kernel_util.h"

#include <algorithm>
#include <string>

#include "common/errors.h"
#include "profiler/kernel_region.h"

namespace mtrain::kernels::detail {

void column_sums_accumulate(float* dst, const float* src, int64_t N, int64_t C, int64_t ld) {
  if (profiler::shape_only()) return;  // a dry run's step: no data
  constexpr int64_t kBlock = 256;      // columns per task: 1 KiB of dst stays in L1
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

int64_t attention_dropout_heads(int64_t H, int64_t head_offset, int64_t total_heads) {
  const int64_t total = total_heads == 0 ? H : total_heads;
  if (head_offset < 0 || total < 0 || head_offset + H > total)
    throw Error(ExitCode::kInternal, "attention: local heads [" + std::to_string(head_offset) + ", " +
                                         std::to_string(head_offset + H) + ") do not fit in total_heads " +
                                         std::to_string(total_heads));
  return total;
}

}  // namespace mtrain::kernels::detail
