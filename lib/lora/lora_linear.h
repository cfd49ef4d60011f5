// LoRA on Megatron's parallel linears: the adapter's own TP split and the
// conjugate communication, so every layout computes the TP=1 result
// y = W x + scale · B A dropout(x). The base linear runs first (its call in
// lib/parallel/tensor_parallel.h is unchanged; a frozen base passes dw =
// null); these functions add the adapter's part to its output and input
// gradient.
//
// Column-parallel base (linear_qkv, linear_fc1; W (OC_local, C)): A (r, C)
// is replicated, B (OC_local, r) holds this rank's output rows. Forward needs
// no communication (h = dropout(x_full) A^T is the same on every rank).
// Backward: each rank's dh = scale dy B_local is a partial sum over its
// output rows; one all-reduce of dh (N, r) over TP gives every rank the
// TP=1 dh, hence the same dA and the d(x) term, added to the base's reduced
// d(x) (this rank's token shard under sequence parallelism).
//
// Row-parallel base (linear_proj, linear_fc2; W (OC, IC_local)): A
// (r, IC_local) holds this rank's input columns, B (OC, r) is replicated.
// Forward: h = dropout(x_local) A_local^T is a partial sum over the input
// columns, all-reduced over TP (N, r) before B; the adapter output is added
// to the base's reduced y (its token shard under SP). Backward needs no
// communication: dy_full is the gradient of every token (the base's
// all-gathered buffer under SP), so dB is the same on every rank.
//
// Buffers: h (N, r) is saved from forward to backward; dh (N, r) and scratch
// (N * IN floats, IN the adapter's local input width) are temporaries.
#pragma once

#include <cstdint>

#include "lora/lora_kernels.h"
#include "parallel/tensor_parallel.h"

namespace mtrain::lora {

// One adapter's weights and gradients on this rank (dA/dB may be null: no gradient wanted).
struct AdapterWeights {
  const float* A = nullptr;
  const float* B = nullptr;
  float* dA = nullptr;
  float* dB = nullptr;
  int64_t rank = 0;
  float scale = 1.f;
  float dropout = 0.f;
  uint64_t seed = 0;  // this layer's, micro-batch's and site's dropout stream
  // The mask numbering of the N rows (DropoutSite; row0 = 0: every token of the batch).
  TokenNumbering tokens;
};

struct AdapterBuffers {
  float* h = nullptr;        // (N, r) saved activation
  float* dh = nullptr;       // (N, r) temporary
  float* scratch = nullptr;  // (N, IN) temporary
};

// y (N, OC_local) += scale · dropout(x_full) A^T B^T; x_full (N, C) as the base saw it.
void column_adapter_forward(const parallel::TpConfig& tp, float* y, const AdapterBuffers& buf, const float* x_full,
                            const AdapterWeights& a, int64_t N, int64_t C, int64_t OC_local);
// dx: the base's reduced input gradient, (N, C) or this rank's token shard (N/tp, C) under SP: ACCUMULATED.
// dy (N, OC_local), x_full (N, C) as in forward.
void column_adapter_backward(const parallel::TpConfig& tp, float* dx, const AdapterBuffers& buf, const float* dy,
                             const float* x_full, const AdapterWeights& a, int64_t N, int64_t C, int64_t OC_local);

// y: the base's reduced output, (N, OC) or this rank's token shard (N/tp, OC) under SP: ACCUMULATED.
// x (N, IC_local) holds input columns [tp_rank * IC_local, ...) of IC_local * tp.
void row_adapter_forward(const parallel::TpConfig& tp, float* y, const AdapterBuffers& buf, const float* x,
                         const AdapterWeights& a, int64_t N, int64_t IC_local, int64_t OC);
// dx (N, IC_local) ACCUMULATED; dy_full (N, OC): the output gradient of every token.
void row_adapter_backward(const parallel::TpConfig& tp, float* dx, const AdapterBuffers& buf, const float* dy_full,
                          const float* x, const AdapterWeights& a, int64_t N, int64_t IC_local, int64_t OC);

}  // namespace mtrain::lora
