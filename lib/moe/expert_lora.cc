#include "moe/expert_lora.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "moe/expert_dispatch.h"
#include "moe/expert_tp.h"
#include "moe/moe_layer_internal.h"
#include "profiler/kernel_region.h"

namespace mtrain::moe {

namespace {

// Null stays null: a dry run's buffers have no storage (its kernels only count their cost).
template <class T>
T* at(T* p, int64_t off) {
  return p ? p + off : nullptr;
}

// Expert e's part of the site: its rows' ids from `off`.
lora::DropoutSite rows_from(const lora::DropoutSite& d, int64_t off) {
  lora::DropoutSite e = d;
  e.row_ids = at(d.row_ids, off);
  e.row_seeds = at(d.row_seeds, off);
  return e;
}

constexpr int64_t kIdBits = 24;  // fp32 holds integers below 2^24 exactly

// EP ranks are data-parallel ranks with micro-batches (mask streams) of their
// own: each grouped row (local expert, then source rank) gets its source's.
void ep_row_seeds(parallel::Comm& ep, const ExpertAdapters& ad, MoeActs& a, int64_t E_local) {
  const int64_t n = ep.size(), rows = static_cast<int64_t>(a.lora_ids.size());
  const int64_t mine[2] = {static_cast<int64_t>(ad.seed_fc1), static_cast<int64_t>(ad.seed_fc2)};
  std::vector<int64_t> all(2 * n);
  ep.all_gather(mine, all.data(), 2);
  a.lora_seeds.resize(2 * rows);
  int64_t g = 0;
  for (int64_t e = 0; e < E_local; ++e)
    for (int64_t s = 0; s < n; ++s)
      for (int64_t i = 0; i < a.counts[s * E_local + e]; ++i, ++g) {
        a.lora_seeds[g] = static_cast<uint64_t>(all[2 * s]);
        a.lora_seeds[rows + g] = static_cast<uint64_t>(all[2 * s + 1]);
      }
}

}  // namespace

bool ExpertAdapterSite::any() const {
  return std::any_of(a.begin(), a.end(), [](const float* p) { return p != nullptr; });
}

lora::DropoutSite expert_dropout(const ExpertAdapters& ad, uint64_t seed, int64_t in_full, int64_t col0,
                                 const int64_t* row_ids, const uint64_t* row_seeds) {
  lora::DropoutSite d;
  if (ad.dropout <= 0.f) return d;
  d.p = ad.dropout;
  d.seed = seed;
  d.row_stride = in_full;
  d.col0 = col0;
  d.row_ids = row_ids;
  d.row_seeds = row_seeds;
  return d;
}

void expert_adapter_forward(float* y, float* h, float* scratch, const float* x, const ExpertAdapterSite& s, int64_t r,
                            float scale, const int64_t* rows, int64_t E_local, int64_t IN, int64_t OUT,
                            const lora::DropoutSite& d) {
  for (int64_t e = 0, off = 0; e < E_local; off += rows[e++]) {
    if (s.a[e] == nullptr) continue;
    lora::lora_down_forward(at(h, off * r), scratch, at(x, off * IN), s.a[e], rows[e], IN, r, rows_from(d, off));
    lora::lora_up_forward(at(y, off * OUT), at(h, off * r), s.b[e], scale, rows[e], r, OUT);
  }
}

void expert_adapter_backward(float* dx, float* dh, float* scratch, const float* dy, const float* x, const float* h,
                             const ExpertAdapterSite& s, int64_t r, float scale, const int64_t* rows, int64_t E_local,
                             int64_t IN, int64_t OUT, const lora::DropoutSite& d) {
  for (int64_t e = 0, off = 0; e < E_local; off += rows[e++]) {
    if (s.a[e] == nullptr) continue;
    lora::lora_up_backward(at(dh, off * r), s.b_grad[e], at(dy, off * OUT), at(h, off * r), s.b[e], scale, rows[e], r,
                           OUT);
    lora::lora_down_backward(at(dx, off * IN), s.a_grad[e], at(dh, off * r), at(x, off * IN), s.a[e], scratch, rows[e],
                             IN, r, rows_from(d, off));
  }
}

void expert_row_ids(int64_t* ids, const int32_t* row_token, const int64_t* rows_all, int64_t E, int64_t token0,
                    int64_t T, int64_t pitch) {
  for (int64_t e = 0, row = 0; e < E; ++e)
    for (int64_t i = 0; i < rows_all[e]; ++i, ++row) {
      const int64_t t = row_token[row];
      const int64_t g = token0 + t;
      ids[row] = t < 0 ? 0 : ((g / T) * pitch + g % T) * E + e;
    }
}

void pack_row_ids(float* out, const int64_t* ids, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    out[2 * i] = static_cast<float>(ids[i] >> kIdBits);
    out[2 * i + 1] = static_cast<float>(ids[i] & ((int64_t{1} << kIdBits) - 1));
  }
}

void unpack_row_ids(int64_t* ids, const float* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    ids[i] = (static_cast<int64_t>(in[2 * i]) << kIdBits) + static_cast<int64_t>(in[2 * i + 1]);
}

namespace detail {

void dispatch_row_ids(const MoeLayerConfig& c, const parallel::TpConfig& tp, const ExpertAdapters& ad, MoeActs& a,
                      MoeWorkspace& w, int64_t B, int64_t T) {
  a.lora_ids.clear();
  a.lora_seeds.clear();
  if (ad.dropout <= 0.f || profiler::shape_only()) return;
  const int64_t Nl = tokens_local(c, B * T), m_max = c.max_rows(Nl), E = c.router.num_experts;
  const int64_t token0 = c.sequence_parallel ? tp.tp->rank() * Nl : 0;
  std::vector<int64_t> local(m_max, 0);
  expert_row_ids(local.data(), routing_of(a, m_max).row_token, a.rows.data(), E, token0, T, ad.seq_pitch);
  if (c.etp == 1 && c.ep == 1) {
    a.lora_ids = std::move(local);
    return;
  }
  // EP x ETP and the allgather dispatcher: refused for LoRA by config (validate_moe.cc).
  if (c.etp > 1 && c.ep > 1) throw std::logic_error("LoRA dropout ids under EP x ETP are not dispatched");
  std::vector<float> send(2 * m_max, 0.f), grouped(2 * c.max_expert_rows(Nl));
  std::vector<int64_t> rows_grp(c.num_local);
  pack_row_ids(send.data(), local.data(), a.M);
  if (c.etp > 1)
    etp_dispatch(*tp.tp, a.counts.data(), rows_grp.data(), grouped.data(), w.gathered.data(), send.data(),
                 a.rows.data(), false, m_max, c.num_local, 2, tp.wire);
  else
    ep_dispatch(*tp.ep, a.counts.data(), rows_grp.data(), grouped.data(), w.gathered.data(), send.data(), a.rows.data(),
                false, c.num_local, 2, tp.wire);
  int64_t rows = 0;
  for (int64_t n : rows_grp) rows += n;
  a.lora_ids.resize(rows);
  unpack_row_ids(a.lora_ids.data(), grouped.data(), rows);
  if (c.ep > 1) ep_row_seeds(*tp.ep, ad, a, c.num_local);
}

}  // namespace detail

}  // namespace mtrain::moe
