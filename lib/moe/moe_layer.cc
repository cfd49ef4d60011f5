#include "moe/moe_layer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>

#include "moe/allgather_dispatch.h"
#include "moe/expert_dispatch.h"
#include "moe/expert_tp.h"
#include "moe/grouped_gemm.h"
#include "moe/moe_layer_internal.h"
#include "moe/permute.h"
#include "profiler/kernel_region.h"
#include "tensor/activation.h"
#include "tensor/precision.h"

namespace mtrain::moe {

namespace k = kernels;
using detail::dispatch_row_ids;
using detail::Routing;
using detail::routing_of;
using detail::tokens_local;

namespace {

void round_act(const MoeLayerConfig& c, float* x, int64_t n) {
  if (c.dtype != DType::kF32 && x) k::round_to_dtype(x, n, c.dtype);
}

// F: the activation's width on this rank.
void activation_forward(const MoeLayerConfig& c, int64_t F, float* act, const float* fc1, const float* bias,
                        int64_t rows, float* scratch) {
  if (c.swiglu) {
    k::bias_swiglu_forward(act, fc1, bias, rows, F, c.fused_activation, scratch);
  } else {
    k::bias_gelu_forward(act, fc1, bias, rows, F, c.fused_activation, scratch);
  }
}

void activation_backward(const MoeLayerConfig& c, int64_t F, float* dfc1, float* dbias, const float* dact,
                         const float* fc1, const float* bias, int64_t rows, float* scratch) {
  if (c.swiglu) {
    k::bias_swiglu_backward(dfc1, dbias, dact, fc1, bias, rows, F, c.fused_activation, scratch);
  } else {
    k::bias_gelu_backward(dfc1, dbias, dact, fc1, bias, rows, F, c.fused_activation, scratch);
  }
}

float* at(float* p, int64_t off) { return p ? p + off : nullptr; }

// The router's token group (Megatron's tp_cp_group): the ranks holding the
// micro-batch's disjoint token shards, TP x CP under context parallelism.
parallel::Comm& token_group(const parallel::TpConfig& tp) { return tp.tp_cp ? *tp.tp_cp : *tp.tp; }
// Half k (0: fc1, 1: fc2) of a (2, rows, r) LoRA activation buffer.
float* lora_half(Tensor& h, int k) { return at(h.data(), k * (h.numel() / 2)); }
// EP: site k's (0: fc1, 1: fc2) per-row mask streams; else null (one stream).
const uint64_t* row_seeds(const MoeActs& a, int k) {
  return a.lora_seeds.empty() ? nullptr : a.lora_seeds.data() + k * (a.lora_seeds.size() / 2);
}
lora::AdapterBuffers shared_lora_buffers(MoeActs& a, MoeWorkspace& w, int k) {
  return {lora_half(a.shared_lora_h, k), w.lora_dh.data(), w.lora_scratch.data()};
}

// With grouped GEMM and no expert bias, the activation is one kernel over
// every local expert's rows, as Megatron's GroupedMLP applies it to the
// grouped fc1 output (it refuses biases); experts with a bias apply theirs
// one expert at a time, as its SequentialMLP runs them.
bool one_activation(const MoeLayerConfig& c, const MoeWeights& wt) {
  return c.grouped_gemm && std::all_of(wt.fc1_bias.begin(), wt.fc1_bias.end(), [](const float* b) { return !b; });
}

// The local experts on in (sum rows, C), `rows` (E_local) per expert -> out
// (sum rows, C) without the fc2 bias; a.fc1 / a.act keep what backward needs.
void experts_forward(const MoeLayerConfig& c, const MoeWeights& wt, MoeActs& a, MoeWorkspace& w, float* out,
                     const float* in, const int64_t* rows) {
  const int64_t C = c.hidden, F = c.ffn_local(), FC1 = c.fc1_local();
  int64_t M = 0;
  for (int64_t e = 0; e < c.num_local; ++e) M += rows[e];
  std::vector<const float*> w1(wt.fc1.begin(), wt.fc1.end()), w2(wt.fc2.begin(), wt.fc2.end());
  grouped_linear_forward(a.fc1.data(), in, w1.data(), rows, c.num_local, C, FC1, c.grouped_gemm);
  const ExpertAdapters& ad = wt.lora;
  const int64_t* ids = a.lora_ids.empty() ? nullptr : a.lora_ids.data();
  if (ad.fc1.any())
    expert_adapter_forward(a.fc1.data(), lora_half(a.lora_h, 0), w.lora_scratch.data(), in, ad.fc1, ad.rank, ad.scale,
                           rows, c.num_local, C, FC1, expert_dropout(ad, ad.seed_fc1, C, 0, ids, row_seeds(a, 0)));
  round_act(c, a.fc1.data(), M * FC1);
  if (one_activation(c, wt))
    activation_forward(c, F, a.act.data(), a.fc1.data(), nullptr, M, w.scratch.data());
  else
    for (int64_t e = 0, off = 0; e < c.num_local; off += rows[e++])
      activation_forward(c, F, at(a.act.data(), off * F), at(a.fc1.data(), off * FC1), wt.fc1_bias[e], rows[e],
                         w.scratch.data());
  round_act(c, a.act.data(), M * F);
  grouped_linear_forward(out, a.act.data(), w2.data(), rows, c.num_local, F, C, c.grouped_gemm);
  if (ad.fc2.any())
    expert_adapter_forward(out, lora_half(a.lora_h, 1), w.lora_scratch.data(), a.act.data(), ad.fc2, ad.rank, ad.scale,
                           rows, c.num_local, F, C,
                           expert_dropout(ad, ad.seed_fc2, ad.ffn, ad.fc2_col0, ids, row_seeds(a, 1)));
}

// din (sum rows, C) OVERWRITTEN from dout (may alias din); weight gradients ACCUMULATED.
void experts_backward(const MoeLayerConfig& c, const MoeWeights& wt, MoeActs& a, MoeWorkspace& w, float* din,
                      const float* dout, const float* in, const int64_t* rows) {
  const int64_t C = c.hidden, F = c.ffn_local(), FC1 = c.fc1_local();
  int64_t M = 0;
  for (int64_t e = 0; e < c.num_local; ++e) M += rows[e];
  std::vector<const float*> w1(wt.fc1.begin(), wt.fc1.end()), w2(wt.fc2.begin(), wt.fc2.end());
  grouped_linear_backward(w.d_act.data(), wt.fc2_grad.data(), dout, a.act.data(), w2.data(), rows, c.num_local, F, C,
                          c.grouped_gemm);
  const ExpertAdapters& ad = wt.lora;
  const int64_t* ids = a.lora_ids.empty() ? nullptr : a.lora_ids.data();
  if (ad.fc2.any())  // before din (which may alias dout) is written
    expert_adapter_backward(w.d_act.data(), w.lora_dh.data(), w.lora_scratch.data(), dout, a.act.data(),
                            lora_half(a.lora_h, 1), ad.fc2, ad.rank, ad.scale, rows, c.num_local, F, C,
                            expert_dropout(ad, ad.seed_fc2, ad.ffn, ad.fc2_col0, ids, row_seeds(a, 1)));
  round_act(c, w.d_act.data(), M * F);
  if (one_activation(c, wt))
    activation_backward(c, F, w.d_fc1.data(), nullptr, w.d_act.data(), a.fc1.data(), nullptr, M, w.scratch.data());
  else
    for (int64_t e = 0, off = 0; e < c.num_local; off += rows[e++])
      activation_backward(c, F, at(w.d_fc1.data(), off * FC1), wt.fc1_bias_grad[e], at(w.d_act.data(), off * F),
                          at(a.fc1.data(), off * FC1), wt.fc1_bias[e], rows[e], w.scratch.data());
  round_act(c, w.d_fc1.data(), M * FC1);
  grouped_linear_backward(din, wt.fc1_grad.data(), w.d_fc1.data(), in, w1.data(), rows, c.num_local, C, FC1,
                          c.grouped_gemm);
  if (ad.fc1.any())
    expert_adapter_backward(din, w.lora_dh.data(), w.lora_scratch.data(), w.d_fc1.data(), in, lora_half(a.lora_h, 0),
                            ad.fc1, ad.rank, ad.scale, rows, c.num_local, C, FC1,
                            expert_dropout(ad, ad.seed_fc1, C, 0, ids, row_seeds(a, 0)));
  round_act(c, din, M * C);
}

// Shared expert: a dense MLP split over TP; out (N_loc, C) OVERWRITTEN.
void shared_forward(const MoeLayerConfig& c, const parallel::TpConfig& tp, const MoeWeights& wt, MoeActs& a,
                    MoeWorkspace& w, const SpBuffers& sp, float* out, const float* x, int64_t N) {
  const int64_t C = c.hidden, Fs = c.shared_local(), FC1s = c.shared_fc1_local(), Nl = tokens_local(c, N);
  float* x_full = c.sequence_parallel ? sp.full_in : const_cast<float*>(x);
  parallel::column_parallel_linear_forward(tp, a.shared_fc1.data(), x_full, x, wt.shared_fc1, nullptr, N, C, FC1s);
  if (wt.shared_fc1_lora.A)
    lora::column_adapter_forward(tp, a.shared_fc1.data(), shared_lora_buffers(a, w, 0), x_full, wt.shared_fc1_lora, N,
                                 C, FC1s);
  round_act(c, a.shared_fc1.data(), N * FC1s);
  activation_forward(c, Fs, a.shared_act.data(), a.shared_fc1.data(), nullptr, N, w.scratch.data());
  round_act(c, a.shared_act.data(), N * Fs);
  parallel::row_parallel_linear_forward(tp, out, sp.full_out, a.shared_act.data(), wt.shared_fc2, N, Fs, C);
  if (wt.shared_fc2_lora.A)
    lora::row_adapter_forward(tp, out, shared_lora_buffers(a, w, 1), a.shared_act.data(), wt.shared_fc2_lora, N, Fs, C);
  round_act(c, out, Nl * C);
  if (!c.shared_gate) return;
  // Qwen2-MoE: out_t *= sigmoid(x_t . gate_weight) on this rank's tokens (x read, out kept, scaled, written).
  profiler::Scope prof(profiler::elementwise_kernel("shared_expert_gate", 4.0 * Nl * C, 3.0 * Nl * C));
  if (profiler::shape_only()) return;
  std::memcpy(a.shared_out.data(), out, sizeof(float) * Nl * C);
  for (int64_t t = 0; t < Nl; ++t) {
    double s = 0;
    for (int64_t j = 0; j < C; ++j) s += static_cast<double>(x[t * C + j]) * wt.shared_gate[j];
    const float g = static_cast<float>(1.0 / (1.0 + std::exp(-s)));
    a.gate.data()[t] = g;
    for (int64_t j = 0; j < C; ++j) out[t * C + j] *= g;
  }
  round_act(c, out, Nl * C);
}

// dx (N_loc, C) OVERWRITTEN with the shared expert's input gradient.
void shared_backward(const MoeLayerConfig& c, const parallel::TpConfig& tp, const MoeWeights& wt, MoeActs& a,
                     MoeWorkspace& w, const SpBuffers& sp, float* dx, const float* dout, const float* x, int64_t N) {
  const int64_t C = c.hidden, Fs = c.shared_local(), FC1s = c.shared_fc1_local(), Nl = tokens_local(c, N);
  const float* d_out = dout;
  if (c.shared_gate) {
    // out = s * g, g = sigmoid(x . w): d(s) = dout * g; d(pre) = <dout, s> g (1 - g).
    profiler::Scope prof(profiler::elementwise_kernel("shared_expert_gate_backward", 3.0 * Nl * C, 3.0 * Nl * C));
    float* ds = w.d_shared.data();
    for (int64_t t = 0; t < Nl && !profiler::shape_only(); ++t) {
      const float g = a.gate.data()[t];
      double dot = 0;
      for (int64_t j = 0; j < C; ++j) {
        dot += static_cast<double>(dout[t * C + j]) * a.shared_out.data()[t * C + j];
        ds[t * C + j] = dout[t * C + j] * g;
      }
      w.dprobs.data()[t] = static_cast<float>(dot * g * (1.0 - g));  // dprobs is free here: d(pre-gate) per token
    }
    if (!profiler::shape_only()) round_act(c, ds, Nl * C);
    d_out = ds;
  }
  parallel::row_parallel_linear_backward(tp, w.shared_d_act.data(), wt.shared_fc2_grad, sp.full_out, d_out,
                                         a.shared_act.data(), wt.shared_fc2, N, Fs, C, c.grad_accumulation,
                                         w.scratch.data());
  if (wt.shared_fc2_lora.A)  // dy of every token: the base's gathered buffer under SP
    lora::row_adapter_backward(tp, w.shared_d_act.data(), shared_lora_buffers(a, w, 1),
                               c.sequence_parallel ? sp.full_out : d_out, a.shared_act.data(), wt.shared_fc2_lora, N,
                               Fs, C);
  round_act(c, w.shared_d_act.data(), N * Fs);
  activation_backward(c, Fs, w.shared_d_fc1.data(), nullptr, w.shared_d_act.data(), a.shared_fc1.data(), nullptr, N,
                      w.scratch.data());
  round_act(c, w.shared_d_fc1.data(), N * FC1s);
  if (c.sequence_parallel) parallel::sp_all_gather(*tp.tp, x, sp.full_in, Nl * C, tp.wire);
  const float* x_full = c.sequence_parallel ? sp.full_in : x;
  parallel::column_parallel_linear_backward(tp, dx, sp.full_out, wt.shared_fc1_grad, nullptr, w.shared_d_fc1.data(),
                                            x_full, wt.shared_fc1, N, C, FC1s, c.grad_accumulation, w.scratch.data());
  if (wt.shared_fc1_lora.A)
    lora::column_adapter_backward(tp, dx, shared_lora_buffers(a, w, 0), w.shared_d_fc1.data(), x_full,
                                  wt.shared_fc1_lora, N, C, FC1s);
  if (!c.shared_gate) return;
  // dx += d(pre) w and d(w) += d(pre) x over this rank's tokens: x read, dx read and written.
  profiler::Scope prof(profiler::elementwise_kernel("shared_expert_gate_input_backward", 3.0 * Nl * C, 4.0 * Nl * C));
  if (profiler::shape_only()) return;
  const float* dpre = w.dprobs.data();
  for (int64_t t = 0; t < Nl; ++t)
    for (int64_t j = 0; j < C; ++j) {
      dx[t * C + j] += dpre[t] * wt.shared_gate[j];
      if (wt.shared_gate_grad) wt.shared_gate_grad[j] += dpre[t] * x[t * C + j];
    }
}

// The fc2 biases of the local experts on rows grouped by `rows` (E_local) per expert.
void add_fc2_bias(const MoeLayerConfig& c, const MoeWeights& wt, float* y, const int64_t* rows) {
  for (int64_t e = 0, off = 0; e < c.num_local; off += rows[e++])
    if (wt.fc2_bias[e])
      for (int64_t r = off; r < off + rows[e]; ++r)
        for (int64_t j = 0; j < c.hidden; ++j) y[r * c.hidden + j] += wt.fc2_bias[e][j];
}
void add_fc2_bias_grad(const MoeLayerConfig& c, const MoeWeights& wt, const float* dy, const int64_t* rows) {
  for (int64_t e = 0, off = 0; e < c.num_local; off += rows[e++])
    if (wt.fc2_bias_grad[e])
      for (int64_t r = off; r < off + rows[e]; ++r)
        for (int64_t j = 0; j < c.hidden; ++j) wt.fc2_bias_grad[e][j] += dy[r * c.hidden + j];
}

// Under EP the fc2 bias is added to the grouped rows before the combine; with
// expert TP those rows are partial sums over the TP group, so only TP rank 0
// adds it (and takes its gradient; the bias's gradient is summed over TP).
bool adds_fc2_bias(const MoeLayerConfig& c, const parallel::TpConfig& tp) { return c.etp == 1 || tp.tp->rank() == 0; }

// The rows a dispatch brought (a.received) beyond the planned expert rows:
// the acts' excess held until the layer's backward ends, the workspace's
// while the layer runs (moe_buffers.cc).
void hold_rows_beyond_plan(const MoeLayerConfig& c, MoeActs& a, MoeWorkspace& w, bool with_acts) {
  const MoeBufferBytes x = moe_rows_beyond_plan(c, a.sized_B, a.sized_T, a.received);
  if (with_acts) a.beyond.hold(x.acts);
  w.beyond.hold(x.workspace);
}

// The alltoall dispatcher's backward (and the local permutation's): dx
// (N_loc, C) ACCUMULATED, w.dprobs OUT.
void routed_backward(const MoeLayerConfig& c, const parallel::TpConfig& tp, const MoeWeights& wt, MoeActs& a,
                     MoeWorkspace& w, float* dx, const float* dout, int64_t Nl) {
  const int64_t C = c.hidden, K = c.router.topk, M = a.M;
  const bool shape = profiler::shape_only();
  const Routing r = routing_of(a, c.perm_rows(Nl));
  unpermute_backward(w.d_perm.data(), w.dprobs.data(), dout, a.y_perm.data(), a.probs_perm.data(), r.row_token,
                     r.slot_row, Nl, K, M, C);
  round_act(c, w.d_perm.data(), M * C);
  if (!shape && c.ep == 1) add_fc2_bias_grad(c, wt, w.d_perm.data(), a.rows.data());
  const int64_t m_max = c.max_rows(Nl);
  if (c.ep > 1) {
    ep_dispatch_rows(c, tp, a, w, w.grp.data(), w.d_perm.data(), m_max, false);
    if (!shape && adds_fc2_bias(c, tp)) add_fc2_bias_grad(c, wt, w.grp.data(), a.rows_grp.data());
    experts_backward(c, wt, a, w, w.grp.data(), w.grp.data(), a.x_grp.data(), a.rows_grp.data());
    ep_combine_rows(c, tp, a, w, w.d_perm.data(), m_max);
  } else if (c.etp > 1) {
    etp_dispatch(*tp.tp, a.counts.data(), a.rows_grp.data(), w.grp.data(), w.gathered.data(), w.d_perm.data(),
                 a.rows.data(), false, m_max, c.num_local, C, tp.wire);
    experts_backward(c, wt, a, w, w.grp.data(), w.grp.data(), a.x_grp.data(), a.rows_grp.data());
    etp_combine(*tp.tp, w.d_perm.data(), w.gathered.data(), w.grp.data(), a.counts.data(), m_max, c.num_local, C,
                tp.wire);
  } else {
    experts_backward(c, wt, a, w, w.d_perm.data(), w.d_perm.data(), a.x_perm.data(), a.rows.data());
  }
  permute_backward(dx, w.d_perm.data(), r.slot_row, Nl, K, C);
}

// The allgather dispatcher (moe/allgather_dispatch.h) from the routed
// tokens to out (N_loc, C) += the routed output.
void allgather_forward(const MoeLayerConfig& c, const parallel::TpConfig& tp, const MoeWeights& wt, MoeActs& a,
                       MoeWorkspace& w, float* out, const float* x, int64_t B, int64_t T) {
  const int64_t Nl = tokens_local(c, B * T);
  // LoRA on these experts: refused by config (validate_moe.cc); its dropout ids are not gathered.
  if (wt.lora.dropout > 0.f) throw std::logic_error("LoRA dropout ids under the allgather dispatcher");
  const AgShape s = ag_shape(c, tp.ep ? tp.ep->rank() : 0, Nl);
  const AgPermutation perm = routing_of(a, c.perm_rows(Nl));
  a.M = ag_dispatch(ag_group(tp), perm, a.rows_grp.data(), a.x_perm.data(), a.probs_perm.data(), w.gathered.data(),
                    w.ag_slots.data(), x, a.route, s, tp.wire);
  a.received = a.M;
  hold_rows_beyond_plan(c, a, w, true);
  experts_forward(c, wt, a, w, a.y_perm.data(), a.x_perm.data(), a.rows_grp.data());
  const bool shape = profiler::shape_only();
  if (!shape && adds_fc2_bias(c, tp)) add_fc2_bias(c, wt, a.y_perm.data(), a.rows_grp.data());
  round_act(c, a.y_perm.data(), a.M * c.hidden);
  ag_combine(ag_group(tp), w.routed.data(), w.gathered.data(), a.y_perm.data(), a.probs_perm.data(), perm, a.M, s,
             w.scratch.data(), tp.wire);
  if (shape) return;
  round_act(c, w.routed.data(), Nl * c.hidden);
  for (int64_t i = 0; i < Nl * c.hidden; ++i) out[i] += w.routed.data()[i];
  if (c.shared_ffn > 0) round_act(c, out, Nl * c.hidden);
}

// Its backward: dx (N_loc, C) ACCUMULATED, w.dprobs OUT.
void allgather_backward(const MoeLayerConfig& c, const parallel::TpConfig& tp, const MoeWeights& wt, MoeActs& a,
                        MoeWorkspace& w, float* dx, const float* dout, int64_t Nl) {
  const AgShape s = ag_shape(c, tp.ep ? tp.ep->rank() : 0, Nl);
  const AgPermutation perm = routing_of(a, c.perm_rows(Nl));
  float* dprobs_all = w.ag_slots.data();
  ag_combine_backward(ag_group(tp), w.d_perm.data(), dprobs_all, w.gathered.data(), dout, a.y_perm.data(),
                      a.probs_perm.data(), perm, a.M, s, tp.wire);
  round_act(c, w.d_perm.data(), a.M * c.hidden);
  if (!profiler::shape_only() && adds_fc2_bias(c, tp)) add_fc2_bias_grad(c, wt, w.d_perm.data(), a.rows_grp.data());
  experts_backward(c, wt, a, w, w.d_perm.data(), w.d_perm.data(), a.x_perm.data(), a.rows_grp.data());
  ag_dispatch_backward(ag_group(tp), dx, w.dprobs.data(), w.gathered.data(), w.routed.data(), dprobs_all,
                       w.d_perm.data(), perm, s, tp.wire);
}

}  // namespace

int64_t MoeLayerConfig::max_rows(int64_t n_loc) const {
  int64_t m = n_loc * router.topk;
  if (router.capacity_factor && router.pad_to_capacity) {
    const int64_t cap = expert_capacity(n_loc, router.num_experts, router.topk, *router.capacity_factor);
    m = std::max(m, router.num_experts * cap);
  }
  return m;
}

void moe_forward(const MoeLayerConfig& c, const parallel::TpConfig& tp, const MoeWeights& wt, MoeActs& a,
                 MoeWorkspace& w, const SpBuffers& sp, float* out, const float* x, int64_t B, int64_t T,
                 bool training) {
  const int64_t N = B * T, Nl = tokens_local(c, N), C = c.hidden, K = c.router.topk;
  if (c.shared_ffn > 0) {
    shared_forward(c, tp, wt, a, w, sp, out, x, N);
  } else if (out) {
    std::memset(out, 0, sizeof(float) * Nl * C);
  }
  // Each TP rank routes its own contiguous token shard of the B sequences of T tokens (sequence parallel);
  // a dry run prices the gate GEMM and the routing pass, then gives every expert its even share of the rows.
  const RouterTokens toks = c.sequence_parallel ? RouterTokens{B, T, tp.tp->rank() * Nl, Nl} : RouterTokens{B, T};
  router_forward(a.route, nullptr, x, wt.router, wt.expert_bias, toks, c.router, training, token_group(tp));
  if (profiler::shape_only()) {
    a.M = Nl * K;
    const int64_t E = c.router.num_experts;
    for (int64_t e = 0; e < E; ++e) a.rows[e] = a.M / E + (e < a.M % E ? 1 : 0);
  }
  if (c.allgather_dispatch()) {
    allgather_forward(c, tp, wt, a, w, out, x, B, T);
    w.beyond.hold(0);
    return;
  }
  if (profiler::shape_only()) {
    permute_forward(nullptr, nullptr, x, nullptr, nullptr, nullptr, a.M, C, c.permute_fusion);
  } else {
    const int64_t m_max = c.max_rows(Nl);
    const Routing r = routing_of(a, m_max);
    const int64_t pad = c.router.pad_to_capacity && a.route.capacity > 0 ? a.route.capacity : 0;
    a.M = build_permutation(r.row_token, r.row_slot, r.slot_row, a.rows.data(), a.route.expert_ids.data(),
                            a.route.kept.data(), Nl, K, c.router.num_experts, pad);
    permute_forward(a.x_perm.data(), a.probs_perm.data(), x, a.route.probs.data(), r.row_token, r.row_slot, a.M, C,
                    c.permute_fusion);
  }
  const int64_t M = a.M, m_max = c.max_rows(Nl);
  if (c.ep > 1) {  // this rank's rows to the experts' EP ranks (and their expert-TP peers) and back
    ep_dispatch_rows(c, tp, a, w, a.x_grp.data(), a.x_perm.data(), m_max, true);
    a.received = std::accumulate(a.rows_grp.begin(), a.rows_grp.end(), int64_t{0});
    hold_rows_beyond_plan(c, a, w, true);
    dispatch_row_ids(c, tp, wt.lora, a, w, B, T);
    experts_forward(c, wt, a, w, w.grp.data(), a.x_grp.data(), a.rows_grp.data());
    if (!profiler::shape_only() && adds_fc2_bias(c, tp)) add_fc2_bias(c, wt, w.grp.data(), a.rows_grp.data());
    ep_combine_rows(c, tp, a, w, a.y_perm.data(), m_max);
  } else if (c.etp > 1) {  // every TP rank's rows through this rank's F/etp slice of each expert
    if (profiler::shape_only()) std::fill(a.counts.begin(), a.counts.end(), 0);
    etp_dispatch(*tp.tp, a.counts.data(), a.rows_grp.data(), a.x_grp.data(), w.gathered.data(), a.x_perm.data(),
                 a.rows.data(), true, m_max, c.num_local, C, tp.wire);
    dispatch_row_ids(c, tp, wt.lora, a, w, B, T);
    if (profiler::shape_only())
      for (int64_t e = 0; e < c.num_local; ++e) a.rows_grp[e] = c.etp * a.rows[e];
    experts_forward(c, wt, a, w, w.grp.data(), a.x_grp.data(), a.rows_grp.data());
    etp_combine(*tp.tp, a.y_perm.data(), w.gathered.data(), w.grp.data(), a.counts.data(), m_max, c.num_local, C,
                tp.wire);
  } else {
    dispatch_row_ids(c, tp, wt.lora, a, w, B, T);
    experts_forward(c, wt, a, w, a.y_perm.data(), a.x_perm.data(), a.rows.data());
  }
  w.beyond.hold(0);
  // After the reduction over expert TP, like a row-parallel bias (EP: added on the experts' rank).
  if (!profiler::shape_only() && c.ep == 1) add_fc2_bias(c, wt, a.y_perm.data(), a.rows.data());
  round_act(c, a.y_perm.data(), M * C);
  if (profiler::shape_only()) {
    unpermute_forward(nullptr, nullptr, nullptr, nullptr, Nl, K, M, C, c.permute_fusion, nullptr);
    return;
  }
  const Routing r = routing_of(a, c.perm_rows(Nl));
  unpermute_forward(w.routed.data(), a.y_perm.data(), a.probs_perm.data(), r.slot_row, Nl, K, M, C, c.permute_fusion,
                    w.scratch.data());
  round_act(c, w.routed.data(), Nl * C);
  for (int64_t i = 0; i < Nl * C; ++i) out[i] += w.routed.data()[i];
  if (c.shared_ffn > 0) round_act(c, out, Nl * C);
}

void moe_backward(const MoeLayerConfig& c, const parallel::TpConfig& tp, const MoeWeights& wt, MoeActs& a,
                  MoeWorkspace& w, const SpBuffers& sp, float* dx, const float* dout, const float* x, int64_t B,
                  int64_t T, float aux_loss_scale) {
  const int64_t N = B * T, Nl = tokens_local(c, N), C = c.hidden;
  if (c.shared_ffn > 0) {
    shared_backward(c, tp, wt, a, w, sp, dx, dout, x, N);
  } else if (dx) {
    std::memset(dx, 0, sizeof(float) * Nl * C);
  }
  const bool shape = profiler::shape_only();
  hold_rows_beyond_plan(c, a, w, false);
  if (c.allgather_dispatch()) {
    allgather_backward(c, tp, wt, a, w, dx, dout, Nl);
  } else {
    routed_backward(c, tp, wt, a, w, dx, dout, Nl);
  }
  w.beyond.hold(0);
  a.beyond.hold(0);
  // Megatron under the per-token loss scales each aux loss by the router's tokens times the token
  // group's size before its autoscaler (router.h, aux_grad_scale).
  const float aux_grad_scale = aux_loss_scale * static_cast<float>(Nl * token_group(tp).size());
  router_backward(dx, wt.router_grad, w.dlogits.data(), w.dprobs.data(), a.route, x, wt.router, c.router,
                  aux_grad_scale);
  if (shape) return;
  round_act(c, dx, Nl * C);
}

}  // namespace mtrain::moe
