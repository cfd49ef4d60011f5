// Cross-entropy of logits (N, V) against targets (N). Only the first Vr
// columns of a row take part (Vr <= V): columns [Vr, V) are padded
// vocabulary ids, treated as -inf logits (zero probability, zero gradient).
// Vr == V is Megatron's behaviour, where padded logits join the softmax.
// losses (N) are per-token -log softmax(logits[:Vr])[target], unweighted; the
// caller weights them. Targets must be in [0, Vr).
#pragma once

#include <cstdint>

namespace mtrain::kernels {

// fused (cross_entropy_loss_fusion): one pass per row computes max and
// log-sum-exp, saved in stats (N, 2); backward recomputes softmax from the
// logits and writes the gradient in the same pass.
// unfused: log_softmax of the real columns materialised into scratch (N, Vr)
// (contiguous, kept for backward), then a gather for the loss; it also fills
// stats if non-null.
// The fused path ignores scratch (may be null).
void cross_entropy_forward(float* losses, float* stats, const float* logits, const int32_t* targets, int64_t N,
                           int64_t V, int64_t Vr, bool fused, float* scratch);
// dlogits (N, V) OVERWRITTEN = dlosses[i] * (softmax(logits_i[:Vr]) - onehot(target_i)) in columns [0, Vr), 0 in
// the padded columns.
// dlogits may alias logits when fused. scratch must be the forward's scratch when !fused.
void cross_entropy_backward(float* dlogits, const float* logits, const float* stats, const int32_t* targets,
                            const float* dlosses, int64_t N, int64_t V, int64_t Vr, bool fused, const float* scratch);
// Scratch floats of the unfused path: N*V (must live from forward to backward).
int64_t cross_entropy_scratch_floats(int64_t N, int64_t V);

}  // namespace mtrain::kernels
