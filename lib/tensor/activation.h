// Bias + activation and bias + dropout + residual, each with a fused single
// pass and an unfused op sequence (through `scratch`), selected by the
// Megatron fusion flags. Dropout masks come from common/rng.h: element i of
// a call keeps its value iff uniform01(seed, i) >= p, so backward regenerates
// the mask and the fused and unfused paths draw the same one.
#pragma once

#include <cstdint>

#include "common/rng.h"

namespace mtrain::kernels {

// SwiGLU (--swiglu). inp (N, 2F): each row is [gate (F) | up (F)] (Megatron's
// linear_fc1 layout); bias (2F) or null.  out (N, F) = silu(gate+bg) * (up+bu).
// scratch: 3*N*F floats when !fused.
void bias_swiglu_forward(float* out, const float* inp, const float* bias, int64_t N, int64_t F, bool fused,
                         float* scratch);
// dinp (N, 2F) OVERWRITTEN; dbias (2F) ACCUMULATED (skipped if null).
void bias_swiglu_backward(float* dinp, float* dbias, const float* dout, const float* inp, const float* bias, int64_t N,
                          int64_t F, bool fused, float* scratch);

// GELU, tanh approximation in both paths (GPT-2's gelu, Megatron's bias_gelu).
// inp (N, F), bias (F) or null, out (N, F). scratch: 2*N*F floats when !fused.
void bias_gelu_forward(float* out, const float* inp, const float* bias, int64_t N, int64_t F, bool fused,
                       float* scratch);
void bias_gelu_backward(float* dinp, float* dbias, const float* dout, const float* inp, const float* bias, int64_t N,
                        int64_t F, bool fused, float* scratch);

// Dropout numbering: element (n, j) of an (N, C) buffer draws mask index
// numbered_token(rows, n) * C + j (common/rng.h), so a token shard of a larger
// tensor (a sequence-parallel rank's tokens from rows.row0) and a batch padded
// to another length (rows.seq / rows.pitch) draw exactly the masks of the same
// tokens of the unsharded, unpadded call. The default numbers rows flat.

// out (N,C) = residual (N,C) + dropout(inp (N,C) + bias (C), p). bias may be null.
// out may alias residual. scratch: N*C floats when !fused.
void bias_dropout_add_forward(float* out, const float* inp, const float* bias, const float* residual, int64_t N,
                              int64_t C, float p, uint64_t seed, bool fused, float* scratch,
                              const TokenNumbering& rows = {});
// dinp (N,C) = dropout_backward(dout) OVERWRITTEN; dbias (C) ACCUMULATED (skipped if null).
// (The residual's gradient is dout itself; the caller keeps it.)
void bias_dropout_add_backward(float* dinp, float* dbias, const float* dout, int64_t N, int64_t C, float p,
                               uint64_t seed, const TokenNumbering& rows = {});

// Plain dropout (embedding dropout): out (N,C) = inp * keep / (1-p). out may alias inp.
void dropout_forward(float* out, const float* inp, int64_t N, int64_t C, float p, uint64_t seed,
                     const TokenNumbering& rows = {});
// din (N,C) = dout * keep / (1-p). din may alias dout.
void dropout_backward(float* din, const float* dout, int64_t N, int64_t C, float p, uint64_t seed,
                      const TokenNumbering& rows = {});

// Scratch floats the unfused (!fused) paths need, forward and backward alike.
// The fused paths ignore scratch (it may be null).
int64_t bias_swiglu_scratch_floats(int64_t N, int64_t F);       // 3*N*F
int64_t bias_gelu_scratch_floats(int64_t N, int64_t F);         // 2*N*F
int64_t bias_dropout_add_scratch_floats(int64_t N, int64_t C);  // N*C

}  // namespace mtrain::kernels
