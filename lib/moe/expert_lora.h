// LoRA adapters on the routed experts' linears, as Megatron-SWIFT wraps a
// TEGroupedLinear: every expert GEMM has its own A and B (PEFT's per-expert
// lora_A / lora_B), so expert e's rows get
//   y_e += scale · (x_e A_e^T) B_e^T
// next to the base GEMM of the same rows (moe/grouped_gemm.h, grouped or
// looped alike). The rows are the ones the base sees: this rank's permuted
// rows, or after the expert-parallel / expert-TP dispatch every source rank's
// rows of the local experts.
//
// Expert tensor parallelism (ETP = TP) splits the adapters like the dense
// LoRA splits over TP, without communication inside the layer: fc1
// (column-parallel) keeps A replicated and B split by output rows; fc2
// (row-parallel) splits A by input columns and keeps B replicated. Each rank's
// output and input-gradient terms are partial sums that the expert combine's
// reduce-scatter adds up with the base's; the replicated halves (fc1's A,
// fc2's B) get partial gradients that the model sums over the TP group like a
// sequence-parallel weight's (ParamInfo::sequence_parallel_grad).
//
// No adapter dropout here: a layout-independent mask would need every row's
// global token id carried through the dispatch (refused in lib/model).
#pragma once

#include <cstdint>
#include <vector>

namespace mtrain::moe {

// One linear (fc1 or fc2) of the local experts; per local expert, null
// where that expert's linear has no adapter (gradients null when frozen).
struct ExpertAdapterSite {
  std::vector<const float*> a, b;  // (r, IN_local), (OUT_local, r)
  std::vector<float*> a_grad, b_grad;
  bool any() const;
};

struct ExpertAdapters {
  int64_t rank = 0;  // r; 0: the model has no expert adapters
  float scale = 1.f;
  ExpertAdapterSite fc1, fc2;
};

// y (M, OUT) ACCUMULATED += scale · (x A_e^T) B_e^T on each expert's rows;
// h (M, r) OVERWRITTEN with x A_e^T (saved for backward). x (M, IN);
// rows (E_local) per expert, back to back.
void expert_adapter_forward(float* y, float* h, const float* x, const ExpertAdapterSite& s, int64_t r, float scale,
                            const int64_t* rows, int64_t E_local, int64_t IN, int64_t OUT);

// dx (M, IN) ACCUMULATED += dh A_e; dA_e, dB_e ACCUMULATED; dh (M, r)
// temporary. dy (M, OUT) the output gradient; x, h as in forward.
void expert_adapter_backward(float* dx, float* dh, const float* dy, const float* x, const float* h,
                             const ExpertAdapterSite& s, int64_t r, float scale, const int64_t* rows, int64_t E_local,
                             int64_t IN, int64_t OUT);

}  // namespace mtrain::moe
