// Ring attention: causal self-attention over a sequence split across the
// context-parallel group (Megatron's CP with transformer-engine's ring,
// MindSpeed's megatron_cp_algo). The sequence is cut into 2*P chunks; CP rank
// r holds chunks r and 2P-1-r (rows [0, c) and [c, 2c) of its local T = 2c),
// so every rank has the same share of the causal triangle. Key/value blocks
// travel around the ring (send to r+1, receive from r-1, P-1 steps); each
// (query chunk i, key chunk j) pair is fully visible (j < i), the causal
// diagonal (j == i) or skipped (j > i); the per-block softmaxes are merged
// with their log-sum-exp. Backward passes the blocks around again, their dK
// and dV travelling with them, and a last step hands each rank its own.
// Document ids (packing) travel with the keys, so masks hold across chunks.
// Attention dropout (CpDropout) draws the single device's mask: a block's
// queries and keys are numbered by their chunks' places in the whole
// sequence (the keys' by the sending rank's chunks), heads by global head.
//
// Layouts as kernels/attention.h: q, out, dq (B, H, T, D); k, v, dk, dv
// (B, G, T, D); lse (B, H, T); doc (B, T) or null; T = local rows = 2c.
#pragma once

#include <cstdint>

#include "parallel/comm.h"

namespace mtrain::parallel {

// The global chunk local half `half` (0, 1) of CP rank `rank` holds.
inline int64_t cp_chunk(int rank, int size, int half) { return half == 0 ? rank : 2 * size - 1 - rank; }

// Attention dropout under context parallelism (p = 0: none), numbered as the
// single device's call over the whole sequence (kernels/attention.h): this
// rank's H heads are heads [head_offset, head_offset + H) of total_heads (0 =
// H; tensor parallelism), a token's position is its place in the whole
// sequence, positions are pitched by max(P * T, mask_seq) (mask_seq:
// --seq_length; the whole sequence is P * T rows).
struct CpDropout {
  float p = 0.0f;
  uint64_t seed = 0;
  int64_t head_offset = 0, total_heads = 0, mask_seq = 0;
};

// The attention mask the ring computes with (MindSpeed's
// --cp-attention-mask-type): causal skips the blocks the causal mask hides
// and half of each diagonal; general computes every step's whole block under
// an explicit mask (twice the attention work; the same result).
enum class CpMask { kCausal, kGeneral };

// Buffers one call uses (the layer's workspace owns them).
// Marks (a profiler op region, index: the step) where a forward step needs
// the block the previous step's pass brought: a step record waits there for
// that pass (the pass itself runs beside the previous step's kernels).
inline constexpr const char* kRingBlockNeeded = "ring_block_needed";

struct RingBuffers {
  float* travel[2] = {nullptr, nullptr};  // each ring_travel_floats(): k | v | dk | dv of a block in flight
  int32_t* docs[2] = {nullptr, nullptr};  // each (B, T): the block's document ids (with doc ids only)
  float* block_out = nullptr;             // (B, H, T, D) one block's softmax output
  float* block_lse = nullptr;             // (B, H, T)
  float* scratch = nullptr;               // kernels::attention_flash_block_scratch_floats(B, H, G, T / 2, D)
};
inline int64_t ring_travel_floats(int64_t B, int64_t G, int64_t T, int64_t D) { return 4 * B * G * T * D; }

// out and lse OVERWRITTEN.
void ring_attention_forward(Comm& cp, float* out, float* lse, const float* q, const float* k, const float* v,
                            const int32_t* doc, int64_t B, int64_t H, int64_t G, int64_t T, int64_t D,
                            const CpDropout& dropout, const RingBuffers& buf, CpMask mask = CpMask::kCausal,
                            Wire wire = {});
// dq, dk, dv OVERWRITTEN; out and lse are the forward's.
void ring_attention_backward(Comm& cp, float* dq, float* dk, float* dv, const float* dout, const float* q,
                             const float* k, const float* v, const float* out, const float* lse, const int32_t* doc,
                             int64_t B, int64_t H, int64_t G, int64_t T, int64_t D, const CpDropout& dropout,
                             const RingBuffers& buf, CpMask mask = CpMask::kCausal, Wire wire = {});

}  // namespace mtrain::parallel
