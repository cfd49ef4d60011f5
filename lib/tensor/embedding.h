// Token (+ learned absolute position) embedding lookup.
#pragma once

#include <cstdint>

namespace mtrain::kernels {

// out (N, C) = wte[tokens[i]] (+ wpe[positions[i]] if wpe is non-null).
void embedding_forward(float* out, const int32_t* tokens, const int32_t* positions, const float* wte, const float* wpe,
                       int64_t N, int64_t C);
// dwte (V, C) += scatter of dout rows; dwpe (P, C) likewise if non-null. ACCUMULATED.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, const int32_t* positions,
                        int64_t N, int64_t C);

}  // namespace mtrain::kernels
