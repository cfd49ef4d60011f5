#include "parallel/ulysses_attention.h"

#include <algorithm>

#include "parallel/ring_attention.h"
#include "tensor/attention.h"

namespace mtrain::parallel {

namespace {

// A (B, X, T, D) tensor of local rows <-> (B, X/P, P*T, D) of whole sequences.
struct Split {
  int P;
  int64_t B, X, T, D;
  int64_t xp() const { return X / P; }
  int64_t chunk() const { return B * xp() * T * D; }  // one rank's block of the all-to-all
  int64_t c() const { return T / 2; }                 // rows per sequence chunk
};

// Local rows of all heads -> whole sequence of this rank's X/P heads.
void seq_to_heads(Comm& cp, const Split& s, float* whole, const float* local, float* send, float* recv, Wire wire) {
  const bool data = cp.moves_data();
  const int64_t xp = s.xp(), TD = s.T * s.D, c = s.c();
  if (data)  // block j: heads [j X/P, (j+1) X/P) of every row of this rank
    for (int j = 0; j < s.P; ++j)
      for (int64_t b = 0; b < s.B; ++b)
        std::copy_n(local + (b * s.X + j * xp) * TD, xp * TD, send + j * s.chunk() + b * xp * TD);
  cp.all_to_all(send, recv, s.chunk(), wire);
  if (!data) return;
  const int64_t Tw = s.P * s.T;
  for (int i = 0; i < s.P; ++i)  // rank i's rows are sequence chunks i and 2P-1-i
    for (int64_t bh = 0; bh < s.B * xp; ++bh)
      for (int half = 0; half < 2; ++half)
        std::copy_n(recv + i * s.chunk() + (bh * s.T + half * c) * s.D, c * s.D,
                    whole + (bh * Tw + cp_chunk(i, s.P, half) * c) * s.D);
}

// The inverse: whole sequence of X/P heads -> this rank's rows of all heads.
void heads_to_seq(Comm& cp, const Split& s, float* local, const float* whole, float* send, float* recv, Wire wire) {
  const bool data = cp.moves_data();
  const int64_t xp = s.xp(), TD = s.T * s.D, c = s.c(), Tw = s.P * s.T;
  if (data)
    for (int i = 0; i < s.P; ++i)
      for (int64_t bh = 0; bh < s.B * xp; ++bh)
        for (int half = 0; half < 2; ++half)
          std::copy_n(whole + (bh * Tw + cp_chunk(i, s.P, half) * c) * s.D, c * s.D,
                      send + i * s.chunk() + (bh * s.T + half * c) * s.D);
  cp.all_to_all(send, recv, s.chunk(), wire);
  if (!data) return;
  for (int j = 0; j < s.P; ++j)
    for (int64_t b = 0; b < s.B; ++b)
      std::copy_n(recv + j * s.chunk() + b * xp * TD, xp * TD, local + (b * s.X + j * xp) * TD);
}

// Every rank's document ids, in sequence order: (B, P*T); null without documents.
const int32_t* whole_docs(Comm& cp, const int32_t* doc, int64_t B, int64_t T, int32_t* buf) {
  if (!doc) return nullptr;
  const int P = cp.size();
  int32_t* gathered = buf;             // (P, B, T)
  int32_t* ordered = buf + P * B * T;  // (B, P*T)
  cp.all_gather(doc, gathered, B * T);
  if (!cp.moves_data()) return ordered;
  const int64_t c = T / 2;
  for (int i = 0; i < P; ++i)
    for (int64_t b = 0; b < B; ++b)
      for (int half = 0; half < 2; ++half)
        std::copy_n(gathered + (i * B + b) * T + half * c, c, ordered + b * P * T + cp_chunk(i, P, half) * c);
  return ordered;
}

// The dropout of this rank's call: heads [rank H/P, (rank+1) H/P) of its H.
CpDropout head_dropout(const Comm& cp, const CpDropout& d, int64_t H) {
  return {d.p, d.seed, d.head_offset + cp.rank() * (H / cp.size()), d.total_heads == 0 ? H : d.total_heads, d.mask_seq};
}

}  // namespace

void ulysses_attention_forward(Comm& cp, float* out, float* lse, const float* q, const float* k, const float* v,
                               const int32_t* doc, int64_t B, int64_t H, int64_t G, int64_t T, int64_t D,
                               const CpDropout& dropout, const UlyssesBuffers& buf, Wire wire) {
  const int P = cp.size();
  const Split sh{P, B, H, T, D}, sg{P, B, G, T, D};
  seq_to_heads(cp, sh, buf.q, q, buf.send, buf.recv, wire);
  seq_to_heads(cp, sg, buf.k, k, buf.send, buf.recv, wire);
  seq_to_heads(cp, sg, buf.v, v, buf.send, buf.recv, wire);
  const int32_t* docs = whole_docs(cp, doc, B, T, buf.docs);
  const CpDropout dr = head_dropout(cp, dropout, H);
  kernels::attention_flash_forward(buf.out, lse, buf.q, buf.k, buf.v, docs, B, H / P, G / P, P * T, D, dr.p, dr.seed,
                                   buf.scratch, dr.head_offset, dr.total_heads, dr.mask_seq);
  heads_to_seq(cp, sh, out, buf.out, buf.send, buf.recv, wire);
}

void ulysses_attention_backward(Comm& cp, float* dq, float* dk, float* dv, const float* dout, const float* q,
                                const float* k, const float* v, const float* out, const float* lse, const int32_t* doc,
                                int64_t B, int64_t H, int64_t G, int64_t T, int64_t D, const CpDropout& dropout,
                                const UlyssesBuffers& buf, Wire wire) {
  const int P = cp.size();
  const Split sh{P, B, H, T, D}, sg{P, B, G, T, D};
  seq_to_heads(cp, sh, buf.q, q, buf.send, buf.recv, wire);
  seq_to_heads(cp, sg, buf.k, k, buf.send, buf.recv, wire);
  seq_to_heads(cp, sg, buf.v, v, buf.send, buf.recv, wire);
  seq_to_heads(cp, sh, buf.out, out, buf.send, buf.recv, wire);
  seq_to_heads(cp, sh, buf.dout, dout, buf.send, buf.recv, wire);
  const int32_t* docs = whole_docs(cp, doc, B, T, buf.docs);
  const CpDropout dr = head_dropout(cp, dropout, H);
  kernels::attention_flash_backward(buf.dq, buf.dk, buf.dv, buf.dout, buf.q, buf.k, buf.v, buf.out, lse, docs, B, H / P,
                                    G / P, P * T, D, dr.p, dr.seed, buf.scratch, dr.head_offset, dr.total_heads,
                                    dr.mask_seq);
  heads_to_seq(cp, sh, dq, buf.dq, buf.send, buf.recv, wire);
  heads_to_seq(cp, sg, dk, buf.dk, buf.send, buf.recv, wire);
  heads_to_seq(cp, sg, dv, buf.dv, buf.send, buf.recv, wire);
}

}  // namespace mtrain::parallel
