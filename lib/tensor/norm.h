// LayerNorm and RMSNorm over the last dimension C of N rows.
// Backward ACCUMULATES into dinp (the input is always the residual stream,
// whose gradient also arrives through the skip connection) and into
// dweight/dbias (gradient accumulation); a null dweight/dbias (a frozen
// parameter) is skipped.
#pragma once

#include <cstdint>

namespace mtrain::kernels {

// out (N,C) = (inp - mean) * rstd * weight (C) + bias (C); saves mean (N), rstd (N).
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int64_t N, int64_t C, float eps);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C);

// out (N,C) = inp * rstd * weight (C), rstd = 1/sqrt(mean(inp^2) + eps); saves rstd (N).
// fused = one pass per row (the fused RMSNorm kernel); unfused = the op sequence
// pow -> mean -> rsqrt -> mul -> mul through `scratch` (N*C floats forward,
// rmsnorm_scratch_floats(N, C) for backward; fused ignores scratch, may be null).
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C, float eps,
                     bool fused, float* scratch);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t N, int64_t C, bool fused, float* scratch);
// Scratch floats the unfused path needs (enough for forward and backward).
int64_t rmsnorm_scratch_floats(int64_t N, int64_t C);

}  // namespace mtrain::kernels
