// Expert tensor parallelism with ETP = TP (Megatron's alltoall dispatcher
// with tp > 1 and ep = 1): every TP rank routes its own token shard, then the
// permuted rows of all TP ranks are all-gathered, so each rank runs every
// expert's F/ETP slice on every rank's tokens; the partial outputs go back
// by reduce-scatter. Gathered rows are ordered as Megatron's
// sort_chunks_by_idxs leaves them: expert-major, then TP rank, then the
// rank's own (token-ascending) order. The rows gathered per rank are the
// most any rank holds (the counts are gathered first), standing for
// Megatron's all-gather-v; the buffers are sized for the worst case Mmax.
#pragma once

#include <cstdint>

#include "parallel/comm.h"

namespace mtrain::moe {

// local (Mmax, C): this rank's permuted rows, local_rows (E) of them per
// expert (padding rows after sum(local_rows) are ignored). gathered:
// (tp * Mmax, C) buffer. counts (tp * E) OUT when gather_counts (else IN:
// the forward's), rows_grp (E) OUT, grouped (sum rows_grp, C) OUT.
void etp_dispatch(parallel::Comm& tp, int64_t* counts, int64_t* rows_grp, float* grouped, float* gathered,
                  const float* local, const int64_t* local_rows, bool gather_counts, int64_t Mmax, int64_t E, int64_t C,
                  parallel::Wire wire);

// The conjugate: grouped (sum rows_grp, C) partial sums back to their ranks'
// orders in `gathered`, reduce-scattered: local (Mmax, C) OVERWRITTEN with
// the sum over TP of this rank's rows (rows past the gathered ones 0).
void etp_combine(parallel::Comm& tp, float* local, float* gathered, const float* grouped, const int64_t* counts,
                 int64_t Mmax, int64_t E, int64_t C, parallel::Wire wire);

}  // namespace mtrain::moe
