// Expert parallelism's token dispatch (Megatron's MoEAlltoAllTokenDispatcher
// with ETP 1): each rank permutes its own tokens over all E experts
// (expert-major, moe/permute.h), sends the rows of the experts EP rank d holds
// ([d*E_local, (d+1)*E_local), Megatron's contiguous split) to d with an
// all-to-all-v over the EP group after exchanging the row counts
// (tokens_per_expert, an all-to-all of E_local counts per rank), and sorts
// what it receives from source-major to expert-major (Megatron's
// sort_chunks_by_idxs: local expert, then source rank, then the source's
// token order). The combine is the exact inverse; the backward runs the
// same pair on the gradients.
#pragma once

#include <cstdint>

#include "parallel/comm.h"

namespace mtrain::moe {

// Rows a rank may receive at most: every EP rank's m_max rows.
inline int64_t ep_recv_rows(int64_t ep, int64_t m_max) { return ep * m_max; }

// local (sum rows_all, C): this rank's permuted rows, rows_all (E = ep *
// E_local) per expert. counts (ep * E_local): rows source rank s sends for
// local expert e, OUT when exchange_counts (the forward) else IN (the
// backward reuses the forward's). recv: (ep_recv_rows, C) buffer. rows_grp
// (E_local) OUT, grouped (sum rows_grp, C) OUT, expert-major.
void ep_dispatch(parallel::Comm& ep, int64_t* counts, int64_t* rows_grp, float* grouped, float* recv,
                 const float* local, const int64_t* rows_all, bool exchange_counts, int64_t E_local, int64_t C,
                 parallel::Wire wire);

// The inverse: grouped (sum rows_grp, C) rows back to the ranks that sent
// them: local (sum rows_all, C) OVERWRITTEN in this rank's permuted order.
void ep_combine(parallel::Comm& ep, float* local, float* recv, const float* grouped, const int64_t* counts,
                const int64_t* rows_all, int64_t E_local, int64_t C, parallel::Wire wire);

}  // namespace mtrain::moe
