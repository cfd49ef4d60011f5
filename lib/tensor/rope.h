// Rotary position embedding, non-interleaved ("rotate_half": dimension i pairs
// with i + D/2), frequencies inv_freq[i] = base^(-2i/D), as in Megatron's
// RotaryEmbedding and Hugging Face Llama/Qwen2. Applied in place to
// x (B, H, T, D) with per-token positions (B, T) (packing restarts positions).
#pragma once

#include <cstdint>

namespace mtrain::kernels {

// fused = cos/sin computed and applied in one pass (apply_rope_fusion);
// unfused = cos/sin tables, rotate_half copy, x*cos + rot*sin as separate ops
// through scratch: rope_scratch_floats(...) = 2*B*T*D + B*H*T*D floats (the
// tables are per (b, t) because positions are). fused ignores scratch.
// D must be even; angles are pos * inv_freq in double in both paths.
void rope_forward(float* x, const int32_t* positions, int64_t B, int64_t H, int64_t T, int64_t D, float base,
                  bool fused, float* scratch);
// The inverse rotation applied to dx (B, H, T, D) in place.
void rope_backward(float* dx, const int32_t* positions, int64_t B, int64_t H, int64_t T, int64_t D, float base,
                   bool fused, float* scratch);
int64_t rope_scratch_floats(int64_t B, int64_t H, int64_t T, int64_t D);

}  // namespace mtrain::kernels
