// Ulysses attention (MindSpeed's ulysses_cp_algo, DeepSpeed-Ulysses): the
// context-parallel ranks trade sequence for heads. Each rank holds its rows
// of every head (the same two chunks as ring attention, parallel/
// ring_attention.h); an all-to-all gives it the whole sequence of H/P heads
// (and G/P key/value groups), it runs ordinary causal flash attention on
// them, and a second all-to-all returns its rows of every head. Backward
// does the same with the gradients (Comm::all_to_all, equal split). Heads
// and groups must divide by P. Attention dropout (CpDropout, parallel/
// ring_attention.h) is the single device's: rank r runs heads [r H/P, (r+1)
// H/P) of its H over the whole sequence, so only the head offset moves.
//
// Layouts: q, out, dq (B, H, T, D); k, v, dk, dv (B, G, T, D); doc (B, T) or
// null, with T = local rows = 2c. lse (B, H, T) floats hold the head-split
// log-sum-exp, (B, H/P, P*T): opaque to the caller, passed back to backward.
#pragma once

#include <cstdint>

#include "parallel/comm.h"
#include "parallel/ring_attention.h"

namespace mtrain::parallel {

// Buffers one call uses (the layer's workspace owns them); "whole" buffers
// hold the whole sequence of this rank's H/P heads or G/P groups.
struct UlyssesBuffers {
  float* q = nullptr;     // (B, H/P, P*T, D) whole-sequence queries
  float* out = nullptr;   // (B, H/P, P*T, D) attention output
  float* dout = nullptr;  // (B, H/P, P*T, D) backward only
  float* dq = nullptr;    // (B, H/P, P*T, D) backward only
  float* k = nullptr;     // (B, G/P, P*T, D), likewise v, dk, dv
  float* v = nullptr;
  float* dk = nullptr;
  float* dv = nullptr;
  float* send = nullptr;     // (B*H*T*D) all-to-all packing
  float* recv = nullptr;     // (B*H*T*D)
  int32_t* docs = nullptr;   // (2, B, P*T): gathered document ids, then in sequence order
  float* scratch = nullptr;  // kernels::attention_flash_scratch_floats(B, H/P, G/P, P*T, D)
};

// out and lse OVERWRITTEN.
void ulysses_attention_forward(Comm& cp, float* out, float* lse, const float* q, const float* k, const float* v,
                               const int32_t* doc, int64_t B, int64_t H, int64_t G, int64_t T, int64_t D,
                               const CpDropout& dropout, const UlyssesBuffers& buf, Wire wire = {});
// dq, dk, dv OVERWRITTEN; out and lse are the forward's.
void ulysses_attention_backward(Comm& cp, float* dq, float* dk, float* dv, const float* dout, const float* q,
                                const float* k, const float* v, const float* out, const float* lse, const int32_t* doc,
                                int64_t B, int64_t H, int64_t G, int64_t T, int64_t D, const CpDropout& dropout,
                                const UlyssesBuffers& buf, Wire wire = {});

}  // namespace mtrain::parallel
