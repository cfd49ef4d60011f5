// Causal self-attention with grouped-query heads (H query heads, G key/value
// groups, R = H/G query heads per group; query head h reads group h / R).
//
// Layouts: qkv (B, T, G*(R+2)*D) is Megatron's fused linear_qkv output, per
// group [R query heads | key | value]; q (B, H, T, D), k and v (B, G, T, D);
// out (B, H, T, D). doc_ids (B, T) may be null; when set, a query attends
// only to keys with the same doc id (packed samples never see each other).
// Scores are scaled by 1/sqrt(D). Attention dropout (p) uses common/rng.h on
// the flattened (b, h, tq, tk) index.
//
// Head sharding (tensor parallelism): the trailing head_offset / total_heads
// say that the H local heads are heads [head_offset, head_offset + H) of a
// layer with total_heads heads (0 = H: unsharded). They only change the
// dropout index (local head h draws the mask of global head head_offset + h
// out of total_heads), so a TP rank's heads are masked exactly like the same
// heads of the single-device run. head_offset + H > total_heads throws.
// mask_seq (0 = T) is the sequence length the dropout index is numbered with
// (--seq_length): a batch padded past its longest row (sequence parallelism
// rounds T up to a multiple of TP) keeps the masks of its real positions.
#pragma once

#include <cstdint>

namespace mtrain::kernels {

void qkv_split_forward(float* q, float* k, float* v, const float* qkv, int64_t B, int64_t T, int64_t G, int64_t R,
                       int64_t D);
// dqkv OVERWRITTEN.
void qkv_split_backward(float* dqkv, const float* dq, const float* dk, const float* dv, int64_t B, int64_t T, int64_t G,
                        int64_t R, int64_t D);

// out (B, T, H*D) from inp (B, H, T, D) and back.
void heads_merge_forward(float* out, const float* inp, int64_t B, int64_t H, int64_t T, int64_t D);
void heads_merge_backward(float* dinp, const float* dout, int64_t B, int64_t H, int64_t T, int64_t D);

// Unfused: materialises probs (B, H, T, T) (softmax output before dropout,
// saved for backward; masked entries are exactly 0). masked_softmax_fusion =
// scale+mask+softmax in one pass per row; otherwise scale, mask fill, softmax
// as separate passes. scratch: attention_unfused_scratch_floats(...) =
// B*H*T*T floats, used within one call only (forward and backward may share
// it; probs must survive from forward to backward).
void attention_unfused_forward(float* out, float* probs, const float* q, const float* k, const float* v,
                               const int32_t* doc_ids, int64_t B, int64_t H, int64_t G, int64_t T, int64_t D,
                               float dropout_p, uint64_t seed, bool masked_softmax_fusion, float* scratch,
                               int64_t head_offset = 0, int64_t total_heads = 0, int64_t mask_seq = 0);
// dq (B,H,T,D), dk, dv (B,G,T,D) all OVERWRITTEN.
void attention_unfused_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                                const float* v, const float* probs, const int32_t* doc_ids, int64_t B, int64_t H,
                                int64_t G, int64_t T, int64_t D, float dropout_p, uint64_t seed, float* scratch,
                                int64_t head_offset = 0, int64_t total_heads = 0, int64_t mask_seq = 0);
int64_t attention_unfused_scratch_floats(int64_t B, int64_t H, int64_t G, int64_t T, int64_t D);

// Flash-style: tiles of queries x keys with an online softmax; saves only the
// row log-sum-exp lse (B, H, T). Backward recomputes probabilities per tile
// and needs the forward's out (B, H, T, D) and lse; dq, dk, dv OVERWRITTEN.
// scratch: attention_flash_scratch_floats(...) (per task a few 64x64 tiles
// and a transposed copy of its keys and values, 2*T*D floats; no T x T
// buffer), used within one call only.
// Both paths: out must not alias q/k/v; gradients must not alias inputs.
void attention_flash_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                             const int32_t* doc_ids, int64_t B, int64_t H, int64_t G, int64_t T, int64_t D,
                             float dropout_p, uint64_t seed, float* scratch, int64_t head_offset = 0,
                             int64_t total_heads = 0, int64_t mask_seq = 0);
void attention_flash_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                              const float* v, const float* out, const float* lse, const int32_t* doc_ids, int64_t B,
                              int64_t H, int64_t G, int64_t T, int64_t D, float dropout_p, uint64_t seed,
                              float* scratch, int64_t head_offset = 0, int64_t total_heads = 0, int64_t mask_seq = 0);
int64_t attention_flash_scratch_floats(int64_t B, int64_t H, int64_t G, int64_t T, int64_t D);

// Where a ring block's attention-dropout mask sits in the whole-sequence call.
struct BlockDropout {
  float p = 0.0f;
  uint64_t seed = 0;
  int64_t head_offset = 0, total_heads = 0;  // the block's heads among the layer's (total 0 = H)
  int64_t pitch = 0;                         // positions per sequence in the numbering (> 0 when p > 0)
  int64_t q_pos0 = 0, k_pos0 = 0;            // positions of the block's first query and key
};

// What a ring block's mask lets through, and what the device computes of it.
enum class BlockMask {
  kVisible,      // every key precedes every query: computed whole
  kCausal,       // the causal diagonal of one chunk (Tq == Tk, same positions), its hidden half skipped
  kCausalWhole,  // that diagonal computed whole under an explicit mask (MindSpeed's general mask)
  kHidden,       // no key precedes any query: computed whole under the explicit mask (general), nothing
                 // comes out (forward: out 0, lse -inf; backward: no gradient)
};

// Ring attention (context parallelism) in blocks: Tq queries (B, H, Tq, D)
// against Tk keys and values (B, G, Tk, D), masked as `mask` says (the device
// prices the part it computes; the CPU computes what the mask lets through,
// the same numbers). Rows are strided: pair (b, h) of q, out, lse, dout, dq starts
// at row pair * q_pitch, group (b, g) of k, v, dk, dv at row (b*G + g) *
// k_pitch; q_doc (B, q_pitch) and k_doc (B, k_pitch) are both null or both
// set (then only equal document ids see each other). Dropout (BlockDropout,
// p = 0: none) draws the mask of the whole-sequence call: element (tq, tk) of
// the block is (q_pos0 + tq, k_pos0 + tk) of its sequence, head h is global
// head head_offset + h of total_heads (0 = H), positions pitched by pitch.
// Forward writes the block's own softmax: out and lse of each row over the
// block's keys (a row that sees none: out 0, lse -inf). Backward takes the
// merged out and lse of the whole row and ACCUMULATES into dq, dk, dv.
// scratch: attention_flash_block_scratch_floats(B, H, G, Tk, D).
void attention_flash_block_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                                   const int32_t* q_doc, const int32_t* k_doc, int64_t B, int64_t H, int64_t G,
                                   int64_t Tq, int64_t Tk, int64_t D, int64_t q_pitch, int64_t k_pitch, BlockMask mask,
                                   float* scratch, const BlockDropout& dropout = {});
void attention_flash_block_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                                    const float* v, const float* out, const float* lse, const int32_t* q_doc,
                                    const int32_t* k_doc, int64_t B, int64_t H, int64_t G, int64_t Tq, int64_t Tk,
                                    int64_t D, int64_t q_pitch, int64_t k_pitch, BlockMask mask, float* scratch,
                                    const BlockDropout& dropout = {});
int64_t attention_flash_block_scratch_floats(int64_t B, int64_t H, int64_t G, int64_t Tk, int64_t D);
// Online-softmax merge of rows: (out, lse) (rows, D), (rows) becomes the
// softmax over the union of both key sets; lse -inf = no keys yet. Its
// kernel region is the caller's (the ring: one "attention_lse_merge" per block).
void attention_lse_merge(float* out, float* lse, const float* block_out, const float* block_lse, int64_t rows,
                         int64_t D);

}  // namespace mtrain::kernels
