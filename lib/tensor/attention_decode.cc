#include "tensor/attention_decode.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/errors.h"

namespace mtrain::kernels {

void attention_decode_forward(float* out, const float* q, const float* k_new, const float* v_new, float* k_cache,
                              float* v_cache, int64_t H, int64_t G, int64_t Tn, int64_t past, int64_t capacity,
                              int64_t D, float* scores) {
  if (past + Tn > capacity) throw Error(ExitCode::kInternal, "attention_decode_forward: the KV cache is full");
  for (int64_t g = 0; g < G; ++g) {
    std::memcpy(k_cache + (g * capacity + past) * D, k_new + g * Tn * D, sizeof(float) * Tn * D);
    std::memcpy(v_cache + (g * capacity + past) * D, v_new + g * Tn * D, sizeof(float) * Tn * D);
  }
  const int64_t R = H / G;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (int64_t h = 0; h < H; ++h) {
    const float* kg = k_cache + (h / R) * capacity * D;  // (capacity, D)
    const float* vg = v_cache + (h / R) * capacity * D;
    for (int64_t i = 0; i < Tn; ++i) {
      const int64_t L = past + i + 1;  // keys this query sees
      const float* qi = q + (h * Tn + i) * D;
      float* oi = out + (h * Tn + i) * D;
      // scores (L) = scale * K (L, D) . q (D)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(L), static_cast<int>(D), scale, kg, static_cast<int>(D),
                  qi, 1, 0.0f, scores, 1);
      const float mx = *std::max_element(scores, scores + L);
      float sum = 0.0f;
      for (int64_t j = 0; j < L; ++j) sum += scores[j] = std::exp(scores[j] - mx);
      const float inv = 1.0f / sum;
      // out (D) = V^T (D, L) . p (L)
      cblas_sgemv(CblasRowMajor, CblasTrans, static_cast<int>(L), static_cast<int>(D), inv, vg, static_cast<int>(D),
                  scores, 1, 0.0f, oi, 1);
    }
  }
}

}  // namespace mtrain::kernels
