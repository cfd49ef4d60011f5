#include "moe/expert_dispatch.h"

#include <cstring>
#include <vector>

#include "moe/expert_tp.h"
#include "moe/moe_layer.h"
#include "profiler/kernel_region.h"

namespace mtrain::moe {

namespace {

// Element counts and displacements of one all-to-all-v side: block p holds
// the rows of per[p * E_local .. + E_local).
struct Blocks {
  std::vector<int64_t> counts, displs;
};
Blocks blocks(const int64_t* per, int64_t n, int64_t E_local, int64_t C) {
  Blocks b{std::vector<int64_t>(n, 0), std::vector<int64_t>(n, 0)};
  for (int64_t p = 0; p < n; ++p) {
    for (int64_t e = 0; e < E_local; ++e) b.counts[p] += per[p * E_local + e] * C;
    if (p > 0) b.displs[p] = b.displs[p - 1] + b.counts[p - 1];
  }
  return b;
}

// Visits every received row in grouped (expert-major) order: fn(row in recv, row in grouped).
template <class Fn>
void for_each_grouped_row(const int64_t* counts, int64_t n, int64_t E_local, Fn fn) {
  std::vector<int64_t> start(n * E_local, 0);  // row of (source s, expert e) in recv
  for (int64_t s = 0, row = 0; s < n; ++s)
    for (int64_t e = 0; e < E_local; ++e) start[s * E_local + e] = row, row += counts[s * E_local + e];
  int64_t g = 0;
  for (int64_t e = 0; e < E_local; ++e)
    for (int64_t s = 0; s < n; ++s)
      for (int64_t i = 0; i < counts[s * E_local + e]; ++i) fn(start[s * E_local + e] + i, g++);
}

}  // namespace

void ep_dispatch(parallel::Comm& ep, int64_t* counts, int64_t* rows_grp, float* grouped, float* recv,
                 const float* local, const int64_t* rows_all, bool exchange_counts, int64_t E_local, int64_t C,
                 parallel::Wire wire) {
  const int64_t n = ep.size();
  if (exchange_counts) {
    ep.all_to_all(rows_all, counts, E_local);
    // Shape only (MetaComm moves nothing): every source is taken to send what this rank sends.
    if (!ep.moves_data())
      for (int64_t s = 0; s < n; ++s)
        for (int64_t e = 0; e < E_local; ++e) counts[s * E_local + e] = rows_all[ep.rank() * E_local + e];
  }
  const Blocks send = blocks(rows_all, n, E_local, C), got = blocks(counts, n, E_local, C);
  ep.all_to_all_v(local, send.counts, send.displs, recv, got.counts, got.displs, wire);
  int64_t total = 0;
  for (int64_t e = 0; e < E_local; ++e) {
    rows_grp[e] = 0;
    for (int64_t s = 0; s < n; ++s) rows_grp[e] += counts[s * E_local + e];
    total += rows_grp[e];
  }
  profiler::Scope prof(profiler::elementwise_kernel("moe_sort_chunks_by_expert", 2.0 * total * C, 0));
  if (profiler::shape_only()) return;
  for_each_grouped_row(counts, n, E_local,
                       [&](int64_t r, int64_t g) { std::memcpy(grouped + g * C, recv + r * C, sizeof(float) * C); });
}

void ep_combine(parallel::Comm& ep, float* local, float* recv, const float* grouped, const int64_t* counts,
                const int64_t* rows_all, int64_t E_local, int64_t C, parallel::Wire wire) {
  const int64_t n = ep.size();
  const Blocks back = blocks(counts, n, E_local, C), mine = blocks(rows_all, n, E_local, C);
  {
    const int64_t total = back.displs[n - 1] + back.counts[n - 1];
    profiler::Scope prof(profiler::elementwise_kernel("moe_sort_chunks_by_rank", 2.0 * total, 0));
    if (!profiler::shape_only())
      for_each_grouped_row(counts, n, E_local, [&](int64_t r, int64_t g) {
        std::memcpy(recv + r * C, grouped + g * C, sizeof(float) * C);
      });
  }
  ep.all_to_all_v(recv, back.counts, back.displs, local, mine.counts, mine.displs, wire);
}

void ep_etp_dispatch(parallel::Comm& ep, parallel::Comm& etp, const EpEtpCounts& n, int64_t* rows_grp, float* grouped,
                     float* recv, float* ep_grp, const float* local, const int64_t* rows_all, bool exchange_counts,
                     int64_t E_local, int64_t m_max, int64_t C, parallel::Wire wire) {
  ep_dispatch(ep, n.ep, n.rows_ep, ep_grp, recv, local, rows_all, exchange_counts, E_local, C, wire);
  const int64_t rows_max = ep_recv_rows(ep.size(), m_max);
  etp_dispatch(etp, n.etp, rows_grp, grouped, recv, ep_grp, n.rows_ep, exchange_counts, rows_max, E_local, C, wire);
}

void ep_etp_combine(parallel::Comm& ep, parallel::Comm& etp, float* local, float* recv, float* ep_grp,
                    const float* grouped, const EpEtpCounts& n, const int64_t* rows_all, int64_t E_local, int64_t m_max,
                    int64_t C, parallel::Wire wire) {
  const int64_t rows_max = ep_recv_rows(ep.size(), m_max);
  etp_combine(etp, ep_grp, recv, grouped, n.etp, rows_max, E_local, C, wire);
  ep_combine(ep, local, recv, ep_grp, n.ep, rows_all, E_local, C, wire);
}

void ep_dispatch_rows(const MoeLayerConfig& c, const parallel::TpConfig& tp, MoeActs& a, MoeWorkspace& w,
                      float* grouped, const float* local, int64_t m_max, bool forward) {
  if (c.etp == 1)
    return ep_dispatch(*tp.ep, a.counts.data(), a.rows_grp.data(), grouped, w.gathered.data(), local, a.rows.data(),
                       forward, c.num_local, c.hidden, tp.wire);
  ep_etp_dispatch(*tp.ep, *tp.tp, {a.counts.data(), a.counts_etp.data(), a.rows_ep.data()}, a.rows_grp.data(), grouped,
                  w.gathered.data(), w.ep_grp.data(), local, a.rows.data(), forward, c.num_local, m_max, c.hidden,
                  tp.wire);
}
void ep_combine_rows(const MoeLayerConfig& c, const parallel::TpConfig& tp, MoeActs& a, MoeWorkspace& w, float* local,
                     int64_t m_max) {
  if (c.etp == 1)
    return ep_combine(*tp.ep, local, w.gathered.data(), w.grp.data(), a.counts.data(), a.rows.data(), c.num_local,
                      c.hidden, tp.wire);
  ep_etp_combine(*tp.ep, *tp.tp, local, w.gathered.data(), w.ep_grp.data(), w.grp.data(),
                 {a.counts.data(), a.counts_etp.data(), a.rows_ep.data()}, a.rows.data(), c.num_local, m_max, c.hidden,
                 tp.wire);
}

}  // namespace mtrain::moe
