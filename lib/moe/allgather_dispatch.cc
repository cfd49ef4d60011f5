#include "moe/allgather_dispatch.h"

#include <cstring>
#include <vector>

#include "common/errors.h"
#include "moe/permute.h"
#include "profiler/kernel_region.h"

namespace mtrain::moe {

namespace {

// This rank's slots into its blocks of the gathered arrays: the expert of
// each kept slot (as a float, exact for any expert count), -1 when the slot
// was dropped; and its probability. Each receiver picks its own experts.
void own_slots(float* ids, float* probs, const RouterForward& route, const AgShape& s) {
  for (int64_t j = 0; j < s.n_loc * s.k; ++j) {
    const bool kept = route.kept.empty() || route.kept[j];
    ids[j] = kept ? static_cast<float>(route.expert_ids[j]) : -1.f;
    probs[j] = route.probs[j];
  }
}

// Shape only: every local expert gets its even share of the group's rows.
int64_t even_rows(int64_t* rows, int64_t G, const AgShape& s) {
  const int64_t slots = G * s.n_loc * s.k, E = s.E;
  int64_t M = 0;
  for (int64_t e = 0; e < s.E_local; ++e) {
    const int64_t ge = s.first + e;
    rows[e] = s.pad > 0 ? G * s.pad : slots / E + (ge < slots % E ? 1 : 0);
    M += rows[e];
  }
  return M;
}

}  // namespace

parallel::Comm& ag_group(const parallel::TpConfig& tp) {
  if (!tp.tp_ep) throw Error(ExitCode::kInternal, "moe: the allgather dispatcher has no expert TP x EP group");
  return *tp.tp_ep;
}

AgShape ag_shape(const MoeLayerConfig& c, int64_t ep_rank, int64_t n_loc) {
  AgShape s;
  s.n_loc = n_loc, s.k = c.router.topk, s.C = c.hidden;
  s.E = c.router.num_experts, s.first = ep_rank * c.num_local, s.E_local = c.num_local;
  if (c.router.pad_to_capacity && c.router.capacity_factor)
    s.pad = expert_capacity(n_loc, c.router.num_experts, c.router.topk, *c.router.capacity_factor);
  s.fused = c.permute_fusion;
  return s;
}

int64_t ag_dispatch(parallel::Comm& g, const AgPermutation& perm, int64_t* rows, float* x_perm, float* probs_perm,
                    float* x_all, float* slots, const float* x, const RouterForward& route, const AgShape& s,
                    parallel::Wire wire) {
  const int64_t G = g.size(), N = G * s.n_loc, nk = s.n_loc * s.k;
  float* ids = slots;              // (G * n_loc * k)
  float* probs = slots + N * s.k;  // (G * n_loc * k)
  g.all_gather(x, x_all, s.n_loc * s.C, wire);
  const bool shape = profiler::shape_only();
  if (!shape) own_slots(ids + g.rank() * nk, probs + g.rank() * nk, route, s);
  g.all_gather(ids + g.rank() * nk, ids, nk);  // Megatron gathers the routing map and the probs
  g.all_gather(probs + g.rank() * nk, probs, nk);
  if (shape) {
    const int64_t M = even_rows(rows, G, s);
    permute_forward(x_perm, probs_perm, x_all, probs, nullptr, nullptr, M, s.C, s.fused);
    return M;
  }
  std::vector<int32_t> experts(N * s.k);
  std::vector<uint8_t> kept(N * s.k);
  for (int64_t j = 0; j < N * s.k; ++j) {  // this rank's experts' slots, by local index
    const int64_t e = ids[j] < 0.f ? -1 : static_cast<int64_t>(ids[j]) - s.first;
    kept[j] = e >= 0 && e < s.E_local;
    experts[j] = kept[j] ? static_cast<int32_t>(e) : 0;
  }
  const int64_t M = build_permutation(perm.row_token, perm.row_slot, perm.slot_row, rows, experts.data(), kept.data(),
                                      N, s.k, s.E_local, s.pad > 0 ? G * s.pad : 0);
  permute_forward(x_perm, probs_perm, x_all, probs, perm.row_token, perm.row_slot, M, s.C, s.fused);
  return M;
}

void ag_combine(parallel::Comm& g, float* out, float* y_all, const float* y_perm, const float* probs_perm,
                const AgPermutation& perm, int64_t M, const AgShape& s, float* scratch, parallel::Wire wire) {
  unpermute_forward(y_all, y_perm, probs_perm, perm.slot_row, g.size() * s.n_loc, s.k, M, s.C, s.fused, scratch);
  g.reduce_scatter(y_all, out, s.n_loc * s.C, parallel::ReduceOp::kSum, wire);
}

void ag_combine_backward(parallel::Comm& g, float* d_perm, float* dprobs_all, float* dy_all, const float* dout,
                         const float* y_perm, const float* probs_perm, const AgPermutation& perm, int64_t M,
                         const AgShape& s, parallel::Wire wire) {
  g.all_gather(dout, dy_all, s.n_loc * s.C, wire);
  unpermute_backward(d_perm, dprobs_all, dy_all, y_perm, probs_perm, perm.row_token, perm.slot_row, g.size() * s.n_loc,
                     s.k, M, s.C);
}

void ag_dispatch_backward(parallel::Comm& g, float* dx, float* dprobs, float* dx_all, float* dx_loc, float* dprobs_all,
                          const float* dx_perm, const AgPermutation& perm, const AgShape& s, parallel::Wire wire) {
  const int64_t N = g.size() * s.n_loc;
  if (!profiler::shape_only()) std::memset(dx_all, 0, sizeof(float) * N * s.C);
  permute_backward(dx_all, dx_perm, perm.slot_row, N, s.k, s.C);
  g.reduce_scatter(dx_all, dx_loc, s.n_loc * s.C, parallel::ReduceOp::kSum, wire);
  g.reduce_scatter(dprobs_all, dprobs, s.n_loc * s.k, parallel::ReduceOp::kSum);
  if (profiler::shape_only()) return;
  for (int64_t i = 0; i < s.n_loc * s.C; ++i) dx[i] += dx_loc[i];
}

}  // namespace mtrain::moe
