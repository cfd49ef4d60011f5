// Causal attention of a few new tokens against a key/value cache (inference
// with a KV cache, one sequence). The Tn new queries sit at positions
// past .. past+Tn-1; query i attends to the cached keys 0 .. past+i, which
// include the new tokens' own keys. Grouped-query heads as in
// attention.h: query head h reads key/value group h / (H/G).
//
// Layouts: q and out (H, Tn, D); k_new and v_new (G, Tn, D), the new tokens'
// keys (after RoPE) and values, which are first written to rows
// past .. past+Tn-1 of k_cache and v_cache (G, capacity, D). scores: past+Tn
// floats of scratch. past + Tn > capacity throws. Scores are scaled by 1/sqrt(D); softmax in fp32 with the row max
// subtracted. Cost per query is linear in the cached length.
#pragma once

#include <cstdint>

namespace mtrain::kernels {

void attention_decode_forward(float* out, const float* q, const float* k_new, const float* v_new, float* k_cache,
                              float* v_cache, int64_t H, int64_t G, int64_t Tn, int64_t past, int64_t capacity,
                              int64_t D, float* scores);

}  // namespace mtrain::kernels
