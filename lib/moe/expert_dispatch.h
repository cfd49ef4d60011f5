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
//
// With expert tensor parallelism (ETP = TP > 1, Megatron's alltoall
// dispatcher with tp > 1) the rows this rank received over EP are then
// all-gathered over the expert-TP group (moe/expert_tp.h), so each rank runs
// its F/etp slice of its experts on the rows of every expert-TP peer; the
// combine reduce-scatters over expert TP before the all-to-all back.
#pragma once

#include <cstdint>

#include "parallel/comm.h"
#include "parallel/tensor_parallel.h"

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

// EP x ETP bookkeeping kept from the forward to the backward.
struct EpEtpCounts {
  int64_t* ep;       // (ep * E_local) as `counts` above
  int64_t* etp;      // (etp * E_local) rows of each expert-TP peer per local expert
  int64_t* rows_ep;  // (E_local) rows this rank received over EP per local expert
};

// ep_dispatch into ep_grp (ep_recv_rows, C), then etp_dispatch of those rows
// (Mmax = ep_recv_rows): grouped (sum rows_grp, C) OUT in Megatron's order
// after its gather (local expert, expert-TP rank, EP source, token). recv:
// (etp * ep_recv_rows, C), the all-to-all and all-gather buffer. The counts
// are OUT when exchange_counts (the forward), else IN.
void ep_etp_dispatch(parallel::Comm& ep, parallel::Comm& etp, const EpEtpCounts& n, int64_t* rows_grp, float* grouped,
                     float* recv, float* ep_grp, const float* local, const int64_t* rows_all, bool exchange_counts,
                     int64_t E_local, int64_t m_max, int64_t C, parallel::Wire wire);

// The inverse: grouped partial sums reduce-scattered over expert TP into
// ep_grp, then ep_combine into local (sum rows_all, C) OVERWRITTEN.
void ep_etp_combine(parallel::Comm& ep, parallel::Comm& etp, float* local, float* recv, float* ep_grp,
                    const float* grouped, const EpEtpCounts& n, const int64_t* rows_all, int64_t E_local, int64_t m_max,
                    int64_t C, parallel::Wire wire);

struct MoeLayerConfig;
struct MoeActs;
struct MoeWorkspace;

// The MoE layer's EP (x ETP) dispatch: grouped (sum a.rows_grp, C) OUT from
// this rank's permuted rows `local` (a.rows per expert); forward: the counts
// are exchanged, else the forward's are reused. Buffers: w.gathered, w.ep_grp.
void ep_dispatch_rows(const MoeLayerConfig& c, const parallel::TpConfig& tp, MoeActs& a, MoeWorkspace& w,
                      float* grouped, const float* local, int64_t m_max, bool forward);
// The inverse from w.grp: local (sum a.rows, C) OVERWRITTEN.
void ep_combine_rows(const MoeLayerConfig& c, const parallel::TpConfig& tp, MoeActs& a, MoeWorkspace& w, float* local,
                     int64_t m_max);

}  // namespace mtrain::moe
