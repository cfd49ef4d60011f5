// Token permutation for the routed experts (Megatron's moe_utils.permute /
// unpermute). A rank's N tokens, each routed to k experts (the router's
// (N, k) expert ids, combine probabilities and kept mask after capacity),
// become M rows grouped by expert in Megatron's order: expert-major, tokens
// ascending within an expert. With padding to capacity every expert owns
// exactly `pad_to` rows; padding rows have no token (-1), zero input and a
// zero combine weight, so they change no result.
//
// fused = --moe_permute_fusion: tokens and their probabilities move in one
// pass, and unpermute applies the probabilities while it sums; unfused runs
// the separate passes of Megatron's unfused path (through `scratch`).
#pragma once

#include <cstdint>

namespace mtrain::moe {

// row_token (M_max), row_slot (M_max): the token and the (t*k + j) routing slot
// of each permuted row (-1: padding); slot_row (N*k): the row of each slot, -1
// when dropped; rows (E): rows per expert. kept (N*k) may be null (nothing
// dropped). Returns M, the rows used. Throws if an expert has more kept
// tokens than pad_to (> 0).
int64_t build_permutation(int32_t* row_token, int32_t* row_slot, int32_t* slot_row, int64_t* rows,
                          const int32_t* experts, const uint8_t* kept, int64_t N, int64_t k, int64_t E, int64_t pad_to);

// x_perm (M, C), probs_perm (M) = rows of x (N, C) and probs (N*k); padding rows 0.
void permute_forward(float* x_perm, float* probs_perm, const float* x, const float* probs, const int32_t* row_token,
                     const int32_t* row_slot, int64_t M, int64_t C, bool fused);
// dx (N, C) += the rows of dx_perm (M, C) of each token, summed in row order. ACCUMULATED.
void permute_backward(float* dx, const float* dx_perm, const int32_t* slot_row, int64_t N, int64_t k, int64_t C);

// out (N, C) = sum over the rows r of token t of probs_perm[r] * y_perm[r]. OVERWRITTEN
// (0 for a token whose every slot was dropped). scratch: M*C floats when !fused.
void unpermute_forward(float* out, const float* y_perm, const float* probs_perm, const int32_t* slot_row, int64_t N,
                       int64_t k, int64_t M, int64_t C, bool fused, float* scratch);
// dy_perm (M, C) = probs_perm[r] * dout[token(r)]; dprobs (N*k) = <dout[t], y_perm[row]>
// (0 for dropped slots). Both OVERWRITTEN.
void unpermute_backward(float* dy_perm, float* dprobs, const float* dout, const float* y_perm, const float* probs_perm,
                        const int32_t* row_token, const int32_t* slot_row, int64_t N, int64_t k, int64_t M, int64_t C);

}  // namespace mtrain::moe
