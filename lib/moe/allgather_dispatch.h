// Megatron-core's MoEAllGatherTokenDispatcher under expert and/or expert
// tensor parallelism. Every rank of the expert TP x EP group `g` (G ranks,
// ParallelState::tp_ep) routes its own N_loc tokens, then all-gathers the
// group's tokens, their expert choices (kept / dropped as its router left
// them) and combine probabilities; it permutes the rows its local experts
// [first, first + E_local) receive (expert-major, gathered token order:
// Megatron's permute of the local routing map), runs its experts (their
// F/etp slices), weights the outputs by the probabilities, unpermutes into
// the (G * N_loc, C) gathered layout and reduce-scatters it back: each
// token's sum over its experts and the expert-TP partial sums. The backward
// is the conjugate: all-gather the output gradient, reduce-scatter the input
// and probability gradients.
//
// Capacity: each rank's router drops over its own tokens before the gather
// (Megatron's router runs before dispatch), so the slots kept are the
// alltoall dispatcher's; with padding each local expert has G * capacity rows.
#pragma once

#include <cstdint>

#include "moe/moe_layer.h"
#include "moe/router.h"
#include "parallel/comm.h"

namespace mtrain::moe {

// The permutation of the gathered slots (G * N_loc * k) onto this rank's rows.
struct AgPermutation {
  int32_t* row_token;  // (M_max) gathered token of each row, -1: padding
  int32_t* row_slot;   // (M_max)
  int32_t* slot_row;   // (G * N_loc * k) row of each gathered slot, -1: not here
};

struct AgShape {
  int64_t n_loc = 0, k = 0, C = 0;
  int64_t E = 0, first = 0, E_local = 0;  // all experts; this rank's
  int64_t pad = 0;                        // > 0: each rank's capacity (rows padded to G * pad per expert)
  bool fused = false;                     // --moe_permute_fusion
};

// The group: tp.tp_ep (GptModel::set_ep_comm); an internal error if it is unset.
parallel::Comm& ag_group(const parallel::TpConfig& tp);

// The layer's shape on EP rank ep_rank with N_loc tokens.
AgShape ag_shape(const MoeLayerConfig& c, int64_t ep_rank, int64_t n_loc);

// x_perm (M, C), probs_perm (M), rows (E_local) and the permutation OUT;
// x_all (G * N_loc, C) and slots (2 * G * N_loc * k floats) are buffers.
// Returns M. Shape only: M is the even share of the gathered rows.
int64_t ag_dispatch(parallel::Comm& g, const AgPermutation& perm, int64_t* rows, float* x_perm, float* probs_perm,
                    float* x_all, float* slots, const float* x, const RouterForward& route, const AgShape& s,
                    parallel::Wire wire);

// out (N_loc, C) OVERWRITTEN: this rank's tokens' weighted sum of the group's
// expert outputs y_perm (M, C). y_all (G * N_loc, C) buffer; scratch M*C floats when unfused.
void ag_combine(parallel::Comm& g, float* out, float* y_all, const float* y_perm, const float* probs_perm,
                const AgPermutation& perm, int64_t M, const AgShape& s, float* scratch, parallel::Wire wire);

// d_perm (M, C), dprobs_all (G * N_loc * k) OVERWRITTEN from dout (N_loc, C); dy_all (G * N_loc, C) buffer.
void ag_combine_backward(parallel::Comm& g, float* d_perm, float* dprobs_all, float* dy_all, const float* dout,
                         const float* y_perm, const float* probs_perm, const AgPermutation& perm, int64_t M,
                         const AgShape& s, parallel::Wire wire);

// dx (N_loc, C) ACCUMULATED with the input gradient of dx_perm (M, C); dprobs
// (N_loc * k) OVERWRITTEN with this rank's slots' probability gradients
// summed over the group; dprobs_all is reduced in place; dx_all (G * N_loc, C) and
// dx_loc (N_loc, C) buffers.
void ag_dispatch_backward(parallel::Comm& g, float* dx, float* dprobs, float* dx_all, float* dx_loc, float* dprobs_all,
                          const float* dx_perm, const AgPermutation& perm, const AgShape& s, parallel::Wire wire);

}  // namespace mtrain::moe
