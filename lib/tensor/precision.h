// Emulated NPU storage precision: round fp32 values to the nearest bf16 or
// fp16 value (round-to-nearest-even), in place. fp16 overflows to +-inf past
// 65504 and keeps subnormals, so fp16 loss scaling is really exercised.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace mtrain::kernels {

float round_bf16(float x);
float round_fp16(float x);
void round_to_dtype(float* x, int64_t n, DType dtype);  // no-op for kF32

// Sum of squares in double (for norms), and a finite check.
double sum_squares(const float* x, int64_t n);
bool all_finite(const float* x, int64_t n);

}  // namespace mtrain::kernels
