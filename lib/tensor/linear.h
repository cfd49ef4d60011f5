// Dense layers through OpenBLAS (row-major; weights in Megatron/PyTorch
// layout (OC, C), transposes via the BLAS flags, never by copying).
// Argument order everywhere in lib/tensor: outputs, inputs, sizes, options.
#pragma once

#include <cstdint>

namespace mtrain::kernels {

// out (N, OC) = inp (N, C) · weight (OC, C)^T [+ bias (OC)]. bias may be null.
void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C,
                    int64_t OC);

// dinp (N, C)    = dout (N, OC) · weight (OC, C)     -- OVERWRITTEN; skipped if dinp is null
// dweight (OC, C) += dout^T · inp                     -- ACCUMULATED; skipped if dweight is null (frozen),
//                                                        in a dry run too (its gradients are non-null tokens)
// dbias (OC)     += column sums of dout               -- ACCUMULATED; skipped if dbias is null
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t C, int64_t OC);

// sgemm rate probe used by bench/ and the log: C (M,N) = A (M,K) · B (K,N).
void sgemm_nn(float* c, const float* a, const float* b, int64_t M, int64_t N, int64_t K);

}  // namespace mtrain::kernels
