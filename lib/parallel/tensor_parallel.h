// Tensor-parallel building blocks (Megatron-core's tensor_parallel package):
// column- and row-parallel linears, the vocab-parallel embedding and the
// vocab-parallel cross-entropy, with optional sequence parallelism (SP).
// Each is a forward/backward pair over caller-owned buffers that runs the
// single-device kernel of lib/tensor on this rank's shard and moves data with
// the conjugate collectives of the TP group (all-reduce, or all-gather /
// reduce-scatter along the tokens under SP). With a TP group of one (or a null
// Comm) no collective is called and every function gives the bits of the
// single-device kernel.
//
// Layouts. Activations are token-major (N, C), N = B*T tokens, row-major.
// Under SP, TP rank r holds tokens [r*N/tp, (r+1)*N/tp) (N % tp == 0 is
// required): the shards are contiguous, so all_gather / reduce_scatter map
// shard <-> full directly. Weights are Megatron's [out, in] row-major, as in
// kernels::linear_forward. The vocabulary is split into equal contiguous
// slices: rank r holds rows [r*V_local, (r+1)*V_local) of the padded table.
//
// Aliasing. Under SP the shard may be the rank's view of the full buffer:
// x == x_full + r*(N/tp)*C (column forward), dx == dx_full + r*... (column
// backward), y == y_full + r*... (row forward), dy == dy_full + r*... (row
// backward), out/dout likewise for the embedding. Otherwise outputs must not
// alias inputs, except dlogits == logits in the fused cross-entropy backward.
//
// Sums over TP ranks are in tp-rank order (comm.h), so results are identical
// on every rank and across runs, and equal the single-device run to fp32
// rounding.
#pragma once

#include <cstdint>

#include "parallel/comm.h"

namespace mtrain::parallel {

struct TpConfig {
  Comm* tp = nullptr;              // the tensor-parallel group (null or size 1: no communication at all)
  bool sequence_parallel = false;  // only meaningful when tp->size() > 1
  // The device dtype of the activations the layers exchange (bf16/fp16 in a
  // 16-bit model): what the collectives report as wire bytes to the cost model.
  Wire wire{};
  // The context-parallel group (ring attention, parallel/ring_attention.h):
  // null or size 1 when the sequence is not split. Carried here because the
  // layers take one communication context.
  Comm* cp = nullptr;
  // The expert-parallel group of an MoE layer's token dispatch (null or size 1: none).
  Comm* ep = nullptr;
  // The expert TP x EP group (the allgather token dispatcher's; null: unused).
  Comm* tp_ep = nullptr;
};

// ---- Linear layers -----------------------------------------------------------------------------

// ColumnParallelLinear (gather_output=False): y (N, OC_local) = x_full (N, C) · w (OC_local, C)^T + b (OC_local).
// b may be null. No SP: x is the full (N, C) input and x_full must be x or null (nothing is copied). SP: x is this
// rank's token shard (N/tp, C), all-gathered into x_full (N, C), which the caller keeps (or re-gathers with
// sp_all_gather) for the backward.
void column_parallel_linear_forward(const TpConfig& tp, float* y, float* x_full, const float* x, const float* w,
                                    const float* b, int64_t N, int64_t C, int64_t OC_local);
// dw (OC_local, C; null: a frozen weight) and db (OC_local, may be null) ACCUMULATED; dx OVERWRITTEN:
// no SP: dx (N, C) = dy (N, OC_local) · w summed over TP (all-reduce); dx_full unused (may be null).
// SP: the (N, C) sum is reduce-scattered into this rank's shard dx (N/tp, C); dx_full (N, C) is the buffer.
// x_full: the forward's full (N, C) input. fused_grad_accumulation: the weight-gradient GEMM accumulates into dw
// (beta = 1); otherwise it is computed into scratch (OC_local*C floats) and then added to dw.
void column_parallel_linear_backward(const TpConfig& tp, float* dx, float* dx_full, float* dw, float* db,
                                     const float* dy, const float* x_full, const float* w, int64_t N, int64_t C,
                                     int64_t OC_local, bool fused_grad_accumulation, float* scratch);

// RowParallelLinear (input_is_parallel=True, skip_bias_add: the caller adds the bias, e.g. in its fused
// bias-dropout-add): partial (N, OC) = x (N, IC_local) · w (OC, IC_local)^T. No SP: y (N, OC) = sum over TP
// (all-reduce), y_full unused (may be null). SP: y (N/tp, OC) = this rank's token shard of the sum
// (reduce-scatter); y_full (N, OC) is the buffer.
void row_parallel_linear_forward(const TpConfig& tp, float* y, float* y_full, const float* x, const float* w, int64_t N,
                                 int64_t IC_local, int64_t OC);
// dy: (N, OC) no SP (dy_full unused, may be null); SP: the token shard (N/tp, OC), all-gathered into dy_full
// (N, OC). dx (N, IC_local) OVERWRITTEN = dy_full · w; dw (OC, IC_local) ACCUMULATED (fused_grad_accumulation as
// above; scratch OC*IC_local floats when false).
void row_parallel_linear_backward(const TpConfig& tp, float* dx, float* dw, float* dy_full, const float* dy,
                                  const float* x, const float* w, int64_t N, int64_t IC_local, int64_t OC,
                                  bool fused_grad_accumulation, float* scratch);

// ---- Sequence-parallel helpers -----------------------------------------------------------------
// On token-major buffers; shard_elems = (N/tp)*C. With one rank they are plain copies (skipping them when SP is
// off is the caller's business). shard may be the rank's view of full.
void sp_all_gather(Comm& tp, const float* shard, float* full, int64_t shard_elems,
                   Wire wire = {});  // (N/tp, C) -> (N, C)
void sp_reduce_scatter(Comm& tp, const float* full, float* shard, int64_t shard_elems,
                       Wire wire = {});  // sum (N, C) -> (N/tp, C)

// ---- Vocab-parallel embedding ------------------------------------------------------------------

// w (V_local, C) holds rows [vocab_start, vocab_start + V_local) of the padded table. Each rank writes its rows
// for the tokens in its range and zeros elsewhere, then: no SP: all-reduce -> out (N, C), out_full unused; SP:
// reduce-scatter -> out = this rank's token shard (N/tp, C), out_full (N, C) the buffer. tokens (N) are the
// full sequence on every rank; a token outside [0, V_local * tp) throws Error(kInternal).
void vocab_parallel_embedding_forward(const TpConfig& tp, float* out, float* out_full, const int32_t* tokens,
                                      const float* w, int64_t N, int64_t C, int64_t vocab_start, int64_t V_local);
// dout: (N, C) no SP (dout_full unused); SP: the token shard (N/tp, C), all-gathered into dout_full (N, C).
// dw (V_local, C) ACCUMULATED for the tokens in range (null: a frozen table, nothing runs), repeated tokens in token
// order (the same bits for any thread count).
void vocab_parallel_embedding_backward(const TpConfig& tp, float* dw, float* dout_full, const float* dout,
                                       const int32_t* tokens, int64_t N, int64_t C, int64_t vocab_start,
                                       int64_t V_local);

// ---- Vocab-parallel cross-entropy --------------------------------------------------------------

// Megatron's vocab_parallel_cross_entropy; fused = --cross_entropy_loss_fusion. logits (N, V_local): this rank's
// slice [vocab_start, vocab_start + V_local) of the padded vocabulary. Ids >= vocab_size are padding: their
// logits count as -inf (no probability, no loss, zero gradient; --mask_padded_vocab); vocab_size = V_local * tp
// is Megatron's softmax over every padded logit. The softmax spans every TP rank's slice (a slice may hold only
// padding). losses (N) = log-sum-exp - target logit, identical on every TP rank.
// fused: stats (N, 2) = (global max, log-sum-exp) per token for the backward, scratch unused (may be null); two
// all-reduces (max; then sum of exp together with the target logit).
// not fused: scratch (N, V_local) keeps the log-softmax of this slice's real columns, (N, Vr) contiguous, from
// forward to backward (as kernels::cross_entropy_forward does); stats unused, filled like the fused path's if
// non-null; three all-reduces (max, sum of exp, target log-probability).
// targets (N) are global ids in [0, vocab_size), vocab_size in [1, V_local * tp]; anything else throws
// Error(kInternal).
void vocab_parallel_cross_entropy_forward(Comm& tp, float* losses, float* stats, const float* logits,
                                          const int32_t* targets, int64_t N, int64_t V_local, int64_t vocab_start,
                                          int64_t vocab_size, bool fused, float* scratch);
// dlogits (N, V_local) OVERWRITTEN = dlosses[i] * (softmax_i - onehot(target_i)) on this slice, 0 in the padded
// columns; no communication. dlogits may alias logits when fused. stats (fused) / scratch (not fused) from the
// forward.
void vocab_parallel_cross_entropy_backward(float* dlogits, const float* logits, const float* stats,
                                           const int32_t* targets, const float* dlosses, int64_t N, int64_t V_local,
                                           int64_t vocab_start, int64_t vocab_size, bool fused, const float* scratch);

}  // namespace mtrain::parallel
