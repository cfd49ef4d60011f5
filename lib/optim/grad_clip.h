// Gradient-norm clipping as in Megatron's clip_grad_norm_fp32 /
// clip_grad_by_total_norm_fp32: the L2 norm of all gradients, then a scale by
// clip_coeff = max_norm / (total_norm + 1e-6) applied only when clip_coeff < 1.
//
// Distributed seam: the norm is computed in two halves. Each rank sums the
// squares of the gradients it owns (grad_norm_sq_local; skip TP-duplicated
// params such as norm weights on tp_rank > 0, exactly as Megatron does), the
// caller all-reduces that sum (SUM over the model-parallel group, plus the DP
// group for a distributed optimizer), then grad_norm_from_sq finishes it.
// Sums are taken in double over a fixed number of blocks whose partials are
// added in block order, so the result is independent of the thread count.
//
// For the cost model, clip_grads is a kernel region (8 bytes and 1 flop per
// gradient); the norm's region is grad_norm_region, opened by the caller,
// which knows what the device pass covers (train::GradSync). In a dry run's
// shape-only step the norm is 0 and nothing is touched. The trainer does not
// call clip_grads: it clips inside the optimizer's pass.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "profiler/probe.h"

namespace mtrain::optim {

// Sum of squares of grads (n), in double, deterministic.
double grad_norm_sq_local(const float* grads, int64_t n);
// Sum of squares of grads over the [begin, end) intervals (flat offsets), in
// double, deterministic: the intervals, in the order given, are read as one
// concatenated sequence and summed with grad_norm_sq_local's block scheme, so
// {[0, n)} gives exactly grad_norm_sq_local(grads, n), and splitting an
// interval into adjacent pieces does not change a bit. The caller lists the
// elements this rank counts (TP duplicates excluded; with the distributed
// optimizer only its owned shard). Throws Error(kInternal) for begin < 0 or end < begin.
double grad_norm_sq_intervals(const float* grads, const std::vector<std::pair<int64_t, int64_t>>& intervals);
// The norm pass over n fp32 gradients as a kernel region: each read once
// (4 bytes), squared and added (2 flops).
profiler::Region grad_norm_region(int64_t n);
// sqrt of the (all-reduced) sum of squares; NaN/Inf pass through so the caller sees them.
double grad_norm_from_sq(double total_sq);
// Single-process convenience: grad_norm_from_sq(grad_norm_sq_local(grads, n)).
double grad_norm(const float* grads, int64_t n);

// Megatron's clip coefficient; 1.0 means "no clipping" (max_norm <= 0 disables clipping).
double clip_coefficient(double max_norm, double total_norm);
// Scales grads (n) in place by clip_coefficient(max_norm, total_norm) when it is < 1.
// Returns the coefficient applied (1.0 when nothing was done).
double clip_grads(float* grads, int64_t n, double max_norm, double total_norm);

}  // namespace mtrain::optim
