// Merging an adapter into its base weight (swift export --merge_lora, PEFT's
// merge_and_unload): W' = W + scale · B · A, scale = alpha / r (alpha /
// sqrt(r) with rsLoRA; LoraConfig::scaling()).
#pragma once

#include <cstdint>

namespace mtrain::lora {

// w (OUT, IN) += scale · B (OUT, r) · A (r, IN). Each element's delta is
// summed in double and w rounded once, so the merged weight is within one
// fp32 rounding of the exact W + scale·B·A whatever the BLAS underneath.
void merge_lora(float* w, const float* A, const float* B, float scale, int64_t OUT, int64_t IN, int64_t r);

}  // namespace mtrain::lora
