// What one device kernel does, in the terms its time depends on: the shared
// vocabulary of the kernels that report it (profiler/kernel_region.h) and the
// simulated device's cost model that prices it (device/cost_model.h).
#pragma once

#include <cstdint>

namespace mtrain {

enum class KernelKind : uint8_t {
  kMemory,            // a pass over memory (norms, activations, casts, optimizer): bytes-bound
  kGemm,              // C (m, n) = A (m, k) · B (k, n), `batch` of them
  kFlashForward,      // fused attention, forward: `batch` = B·H heads of (m = Tq) x (n = Tk) x (k = D)
  kFlashBackward,     // fused attention, backward (recomputes the scores)
  kUnfusedAttention,  // attention as batched GEMMs plus the score tensor's softmax / dropout passes
};

struct KernelWork {
  KernelKind kind = KernelKind::kMemory;
  double flops = 0;  // as counted: full blocks for attention
  double bytes = 0;  // read plus written
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;
  // Attention with a causal mask: only the blocks on or below the diagonal run.
  bool causal = false;
  bool operator==(const KernelWork&) const = default;
};

}  // namespace mtrain
