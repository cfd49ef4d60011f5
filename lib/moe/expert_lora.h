// LoRA adapters on the routed experts' linears, as Megatron-SWIFT wraps a
// TEGroupedLinear: every expert GEMM has its own A and B (PEFT's per-expert
// lora_A / lora_B), so expert e's rows get
//   y_e += scale · (dropout(x_e) A_e^T) B_e^T
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
// Adapter dropout is counter-based (lora/lora_kernels.h) with each row
// numbered by its (token, expert): id = numbered token * E + global expert,
// the token numbered by (sequence, position) as the dense adapters do, from
// the stream of the row's micro-batch. The ids travel with the rows through
// the dispatch and an EP rank learns its peers' streams (their micro-batches
// differ), so every layout draws the single device's mask for every row.
#pragma once

#include <cstdint>
#include <vector>

#include "lora/lora_kernels.h"

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
  float dropout = 0.f;                  // p on the adapters' input (0 outside training)
  uint64_t seed_fc1 = 0, seed_fc2 = 0;  // this layer's and micro-batch's mask streams
  int64_t seq_pitch = 0;                // tokens per sequence in the mask numbering
  int64_t ffn = 0;                      // F of an expert: fc2's full input width
  int64_t fc2_col0 = 0;                 // this rank's first fc2 input column (ETP)
  ExpertAdapterSite fc1, fc2;
};

// The mask of one site: p, seed, the input's full width and this rank's first
// column, the rows' ids and (under EP, else null) their own seeds.
lora::DropoutSite expert_dropout(const ExpertAdapters& ad, uint64_t seed, int64_t in_full, int64_t col0,
                                 const int64_t* row_ids, const uint64_t* row_seeds);

// y (M, OUT) ACCUMULATED += scale · (dropout(x) A_e^T) B_e^T on each expert's
// rows; h (M, r) OVERWRITTEN with dropout(x) A_e^T (saved for backward).
// x (M, IN); rows (E_local) per expert, back to back; scratch: (max rows, IN)
// floats when d.p > 0.
void expert_adapter_forward(float* y, float* h, float* scratch, const float* x, const ExpertAdapterSite& s, int64_t r,
                            float scale, const int64_t* rows, int64_t E_local, int64_t IN, int64_t OUT,
                            const lora::DropoutSite& d);

// dx (M, IN) ACCUMULATED += (dh A_e) ⊙ mask; dA_e, dB_e ACCUMULATED; dh (M,
// r) temporary. dy (M, OUT) the output gradient; x, h, d as in forward.
void expert_adapter_backward(float* dx, float* dh, float* scratch, const float* dy, const float* x, const float* h,
                             const ExpertAdapterSite& s, int64_t r, float scale, const int64_t* rows, int64_t E_local,
                             int64_t IN, int64_t OUT, const lora::DropoutSite& d);

// ids (M) of this rank's permuted rows (expert-major over all E experts,
// rows_all per expert; row_token -1: padding, id 0, its input is zero):
// token token0 + row_token[r] of sequences of T tokens, numbered with `pitch`.
void expert_row_ids(int64_t* ids, const int32_t* row_token, const int64_t* rows_all, int64_t E, int64_t token0,
                    int64_t T, int64_t pitch);

// ids <-> (n, 2) floats of 24 bits each (exact in fp32), so they travel
// through the row dispatch (moe/expert_dispatch.h, moe/expert_tp.h) as C = 2.
void pack_row_ids(float* out, const int64_t* ids, int64_t n);
void unpack_row_ids(int64_t* ids, const float* in, int64_t n);

}  // namespace mtrain::moe
