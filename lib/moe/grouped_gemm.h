// The routed experts' GEMMs (Megatron's TEGroupedMLP vs SequentialMLP).
// Rows of every local expert lie back to back in one buffer, expert-major
// ("permuted tokens"): expert g owns rows [sum_{h<g} rows[h], ... + rows[g]).
// Weights stay in Megatron/PyTorch layout (OC, C), one tensor per expert.
//
// grouped = true : one kernel call runs every expert's GEMM: its tiles (expert,
//                  row block) are scheduled together over the OpenMP threads,
//                  each tile one single-threaded sgemm (TE's grouped GEMM).
// grouped = false: a loop of per-expert GEMMs, each multithreaded by OpenBLAS.
// Both compute every output element as the same C-term dot product; only the
// BLAS kernel's summation order may differ.
#pragma once

#include <cstdint>

namespace mtrain::moe {

// out (M, OC) = inp (M, C) · W_g (OC, C)^T for the rows of each expert g.
void grouped_linear_forward(float* out, const float* inp, const float* const* weights, const int64_t* rows,
                            int64_t groups, int64_t C, int64_t OC, bool grouped);

// dinp (M, C) = dout (M, OC) · W_g        -- OVERWRITTEN (skipped if null)
// dW_g (OC, C) += dout_g^T · inp_g        -- ACCUMULATED (skipped where dweights[g] is null)
void grouped_linear_backward(float* dinp, float* const* dweights, const float* dout, const float* inp,
                             const float* const* weights, const int64_t* rows, int64_t groups, int64_t C, int64_t OC,
                             bool grouped);

}  // namespace mtrain::moe
