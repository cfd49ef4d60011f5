#include "lora/lora_merge.h"

#include <algorithm>
#include <vector>

namespace mtrain::lora {

void merge_lora(float* w, const float* A, const float* B, float scale, int64_t OUT, int64_t IN, int64_t r) {
  std::vector<double> row(static_cast<size_t>(IN));
  for (int64_t o = 0; o < OUT; ++o) {
    std::fill(row.begin(), row.end(), 0.0);
    for (int64_t k = 0; k < r; ++k) {
      const double b = B[o * r + k];
      for (int64_t i = 0; i < IN; ++i) row[static_cast<size_t>(i)] += b * A[k * IN + i];
    }
    for (int64_t i = 0; i < IN; ++i)
      w[o * IN + i] = static_cast<float>(w[o * IN + i] + static_cast<double>(scale) * row[static_cast<size_t>(i)]);
  }
}

}  // namespace mtrain::lora
