// Context-parallel attention inside a decoder layer: the workspace buffers of
// the ring or of Ulysses, and the calls into lib/parallel.
#include "model/cp_attention.h"

#include <algorithm>

#include "parallel/ring_attention.h"
#include "parallel/ulysses_attention.h"
#include "tensor/attention.h"

namespace mtrain::model {

using device::MemCategory;
namespace k = kernels;

namespace {

// The ring's buffers in the workspace (document ids live in fp32-sized slots).
parallel::RingBuffers ring_buffers(Workspace& w, int64_t B, int64_t G, int64_t T, int64_t D) {
  const int64_t travel = parallel::ring_travel_floats(B, G, T, D);
  float* kv = w.ring_travel.data();
  auto* docs = reinterpret_cast<int32_t*>(w.ring_docs.data());
  const int64_t doc_pitch = w.ring_docs.numel() / 2;
  parallel::RingBuffers r;
  r.travel[0] = kv;
  r.travel[1] = kv ? kv + travel : nullptr;
  r.docs[0] = docs;
  r.docs[1] = docs ? docs + doc_pitch : nullptr;
  r.block_out = w.ring_block_out.data();
  r.block_lse = w.ring_block_lse.data();
  r.scratch = w.scratch.data();
  return r;
}

// Ulysses' buffers in the workspace.
parallel::UlyssesBuffers ulysses_buffers(Workspace& w) {
  const int64_t nh = w.ulysses_heads.numel() / 4, ng = w.ulysses_groups.numel() / 4;
  const int64_t np = w.ulysses_pack.numel() / 2;
  float *h = w.ulysses_heads.data(), *g = w.ulysses_groups.data(), *pk = w.ulysses_pack.data();
  auto at = [](float* base, int64_t off) { return base ? base + off : nullptr; };
  parallel::UlyssesBuffers u;
  u.q = h, u.out = at(h, nh), u.dout = at(h, 2 * nh), u.dq = at(h, 3 * nh);
  u.k = g, u.v = at(g, ng), u.dk = at(g, 2 * ng), u.dv = at(g, 3 * ng);
  u.send = pk, u.recv = at(pk, np);
  u.docs = reinterpret_cast<int32_t*>(w.ulysses_docs.data());
  u.scratch = w.scratch.data();
  return u;
}

// This rank's attention dropout: its TP heads, numbered over --seq_length.
parallel::CpDropout cp_dropout(const ModelConfig& c, float p, uint64_t seed) {
  return {p, seed, c.tp_rank * c.heads_local(), c.heads, c.seq_length};
}

parallel::CpMask ring_mask(const ModelConfig& c) {
  return c.cp_general_mask ? parallel::CpMask::kGeneral : parallel::CpMask::kCausal;
}

}  // namespace

// Causal attention of this rank's rows over the whole sequence split across
// the CP group: the ring or Ulysses.
void cp_attention_forward(const ModelConfig& c, const parallel::TpConfig& tp, LayerActs& a, Workspace& w,
                          const TokenBatch& b, int64_t H, int64_t G, int64_t D, float dropout_p, uint64_t seed) {
  const parallel::CpDropout dr = cp_dropout(c, dropout_p, seed);
  if (c.cp_ulysses)
    parallel::ulysses_attention_forward(*tp.cp, a.att.data(), a.softmax_stats.data(), a.q.data(), a.k.data(),
                                        a.v.data(), b.doc_ids, b.B, H, G, b.T, D, dr, ulysses_buffers(w), tp.wire);
  else
    parallel::ring_attention_forward(*tp.cp, a.att.data(), a.softmax_stats.data(), a.q.data(), a.k.data(), a.v.data(),
                                     b.doc_ids, b.B, H, G, b.T, D, dr, ring_buffers(w, b.B, G, b.T, D), ring_mask(c),
                                     tp.wire);
}

void cp_attention_backward(const ModelConfig& c, const parallel::TpConfig& tp, LayerActs& a, Workspace& w,
                           const TokenBatch& b, int64_t H, int64_t G, int64_t D, float dropout_p, uint64_t seed) {
  const parallel::CpDropout dr = cp_dropout(c, dropout_p, seed);
  if (c.cp_ulysses)
    parallel::ulysses_attention_backward(*tp.cp, w.d_q.data(), w.d_k.data(), w.d_v.data(), w.d_att.data(), a.q.data(),
                                         a.k.data(), a.v.data(), a.att.data(), a.softmax_stats.data(), b.doc_ids, b.B,
                                         H, G, b.T, D, dr, ulysses_buffers(w), tp.wire);
  else
    parallel::ring_attention_backward(*tp.cp, w.d_q.data(), w.d_k.data(), w.d_v.data(), w.d_att.data(), a.q.data(),
                                      a.k.data(), a.v.data(), a.att.data(), a.softmax_stats.data(), b.doc_ids, b.B, H,
                                      G, b.T, D, dr, ring_buffers(w, b.B, G, b.T, D), ring_mask(c), tp.wire);
}

int64_t cp_scratch_floats(const ModelConfig& c, int64_t B, int64_t H, int64_t G, int64_t T, int64_t D) {
  if (c.cp == 1) return 0;
  if (c.cp_ulysses) return k::attention_flash_scratch_floats(B, H / c.cp, G / c.cp, c.cp * T, D);
  return k::attention_flash_block_scratch_floats(B, H, G, T / 2, D);
}

void allocate_cp_workspace(Workspace& w, const ModelConfig& c, device::Device& dev, bool meta) {
  if (c.cp == 1) return;
  const DType t = c.dtype;
  const MemCategory act = MemCategory::kActivations, comm = MemCategory::kCommBuffers;
  const int64_t B = c.micro_batch, T = c.seq_local(), H = c.heads_local(), G = c.groups_local(), D = c.head_dim;
  if (c.cp_ulysses) {  // the all-to-all's blocks are communication buffers
    w.ulysses_heads = Tensor(dev, {4, B * H * T * D}, t, act, "ulysses whole-sequence heads", meta);
    w.ulysses_groups = Tensor(dev, {4, B * G * T * D}, t, act, "ulysses whole-sequence key/value groups", meta);
    w.ulysses_pack = Tensor(dev, {2, B * H * T * D}, t, comm, "ulysses all-to-all blocks", meta);
    w.ulysses_docs = Tensor(dev, {2, B * c.cp * T}, DType::kF32, comm, "ulysses document ids", meta);
  } else {  // what the ring receives is a communication buffer
    w.ring_travel = Tensor(dev, {2, parallel::ring_travel_floats(B, G, T, D)}, t, comm,
                           "ring attention K/V blocks in flight", meta);
    w.ring_docs = Tensor(dev, {2, B * T}, DType::kF32, comm, "ring attention document ids", meta);
    w.ring_block_out = Tensor(dev, {B, H, T, D}, t, act, "ring attention block output", meta);
    w.ring_block_lse = Tensor(dev, {B, H, T}, DType::kF32, act, "ring attention block log-sum-exp", meta);
  }
}

}  // namespace mtrain::model
