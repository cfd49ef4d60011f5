// The LoRA adapter's dense math as forward/backward kernel pairs (outputs,
// inputs, sizes, options), on one rank's buffers and without communication:
//   h (N, r) = dropout(x) (N, IN) · A (r, IN)^T           lora_down_forward
//   y (N, OUT) += scale · h · B (OUT, r)^T                 lora_up_forward
// PEFT's lora_B(lora_A(dropout(x))) * scaling. The dropout mask is
// counter-based (common/rng.h): element (n, j) of x keeps with the draw at
// index numbered_token(tokens, n) * row_stride + col0 + j of `seed`, so a
// token or column shard of x draws exactly its part of the unsharded mask,
// and backward regenerates it instead of storing it. The numbering is the
// hidden dropout's (TokenNumbering): a token's mask depends on its sequence
// and position only, not on how far the batch was padded (sequence
// parallelism) nor on which context-parallel chunk holds it. GEMMs through
// OpenBLAS.
#pragma once

#include <cstdint>

#include "common/rng.h"

namespace mtrain::lora {

// Where a (N, IN) block sits in the unsharded (tokens, in-features) input,
// and the dropout probability (0: identity, no draws).
struct DropoutSite {
  float p = 0.f;
  uint64_t seed = 0;
  int64_t row_stride = 0;  // in-features of the unsharded input
  int64_t col0 = 0;        // first in-feature of the block
  TokenNumbering tokens;   // the block's rows: first token (row0), sequences, CP chunks
  // Per row of the block, its number in place of the token numbering above
  // (an MoE expert's permuted rows: token and expert, moe/expert_lora.h); null: unused.
  const int64_t* row_ids = nullptr;
  // Per row, its mask stream in place of seed (expert rows of several
  // micro-batches under expert parallelism); null: unused.
  const uint64_t* row_seeds = nullptr;
};

// h (N, r) OVERWRITTEN = dropout(x) · A^T. scratch (N, IN) holds dropout(x)
// when p > 0 (may be null when p == 0).
void lora_down_forward(float* h, float* scratch, const float* x, const float* A, int64_t N, int64_t IN, int64_t r,
                       const DropoutSite& d);
// y (N, OUT) ACCUMULATED += scale · h · B^T.
void lora_up_forward(float* y, const float* h, const float* B, float scale, int64_t N, int64_t r, int64_t OUT);

// dh (N, r) OVERWRITTEN = scale · dy · B; dB (OUT, r) ACCUMULATED += scale · dy^T · h (skipped if null).
void lora_up_backward(float* dh, float* dB, const float* dy, const float* h, const float* B, float scale, int64_t N,
                      int64_t r, int64_t OUT);
// dA (r, IN) ACCUMULATED += dh^T · dropout(x) (skipped if null);
// dx (N, IN) ACCUMULATED += (dh · A) ⊙ dropout mask (skipped if null).
// scratch: N*IN floats.
void lora_down_backward(float* dx, float* dA, const float* dh, const float* x, const float* A, float* scratch,
                        int64_t N, int64_t IN, int64_t r, const DropoutSite& d);

}  // namespace mtrain::lora
