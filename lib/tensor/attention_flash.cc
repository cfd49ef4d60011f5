// Flash-style attention: kQ x kK tiles of scores with an online softmax (a
// running max and sum per query row), so only the row log-sum-exp is saved.
// Backward recomputes each tile's probabilities from lse and uses
// D_i = rowsum(dout ∘ out), which stays exact under dropout because out is
// the dropped output: sum_k P_ik dP_ik = dout_i · sum_k P_ik Z_ik v_k.
// Tiles entirely above the causal diagonal are never visited.
//
// The same tile loops serve ring attention (context parallelism): a block of
// Tq queries against a block of Tk keys, either the causal diagonal (the same
// sequence chunk) or fully visible (an earlier chunk), each side with its own
// document ids and row pitch; backward then accumulates.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "common/errors.h"
#include "profiler/kernel_region.h"
#include "tensor/attention.h"
#include "tensor/kernel_util.h"

namespace mtrain::kernels {
namespace {

constexpr int64_t kParallelWork = int64_t{1} << 18;        // see attention.cc
constexpr int64_t kQ = 64;                                 // queries per tile
constexpr int64_t kK = 64;                                 // keys per tile
constexpr int64_t kForwardTaskFloats = kQ * kK + 2 * kQ;   // S | running max | running sum (+ K^T)
constexpr int64_t kBackwardTaskFloats = 3 * kQ * kK + kQ;  // P | dP | dropout multipliers | D_i (+ K^T, V^T)

// Each task first transposes its keys (and, in backward, values) tile by
// tile, so that S = Q K^T and dP = dO V^T run as row-major NN GEMMs on
// (D, kK) tiles: OpenBLAS's small-matrix kernels (no packing, no buffer lock)
// cover NN and TN tiles but not NT ones, which take the packing path at
// about 2/3 the speed.
int64_t tiled_floats(int64_t T, int64_t D) { return (T + kK - 1) / kK * kK * D; }
int64_t forward_task_floats(int64_t T, int64_t D) { return kForwardTaskFloats + tiled_floats(T, D); }
int64_t backward_task_floats(int64_t T, int64_t D) { return kBackwardTaskFloats + 2 * tiled_floats(T, D); }

// x (T, D) -> xt: key tile j is (D, kK) at xt + j * kK * D, element (d, c) =
// x[j * kK + c, d]; columns past T stay unwritten (the GEMMs never read them).
void transpose_tiles(float* xt, const float* x, int64_t T, int64_t D) {
  for (int64_t k0 = 0; k0 < T; k0 += kK) {
    const int64_t nk = std::min(kK, T - k0);
    float* dst = xt + k0 * D;
    for (int64_t c = 0; c < nk; ++c)
      for (int64_t d = 0; d < D; ++d) dst[d * kK + c] = x[(k0 + c) * D + d];
  }
}

// Scratch slot of the calling thread: its thread number when every thread
// has one (tasks >= threads), so a thread reuses the same, cache-warm tiles
// from task to task; else the task's own slot. Every tile is written before
// it is read, so the choice does not change any result.
int64_t scratch_slot(int64_t task, int64_t ntasks) {
  const int64_t nth = omp_get_num_threads();
  return nth <= ntasks ? omp_get_thread_num() : task;
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t lda, const float* b,
          int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(M),
              static_cast<int>(N), static_cast<int>(K), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}

// One (b, h) pair's block: Tq query rows against Tk key rows. causal: key
// row j is visible to query row i only if j <= i (the same positions on both
// sides); otherwise every key precedes every query. qdoc (Tq) and kdoc (Tk)
// are both null or both set: then only equal document ids see each other.
struct Block {
  int64_t Tq, Tk;
  bool causal;
  const int32_t* qdoc;
  const int32_t* kdoc;
  // Keys a query tile [q0, q0 + nq) can see: up to its last row when causal.
  int64_t key_end(int64_t q0, int64_t nq) const { return causal ? std::min(q0 + nq, Tk) : Tk; }
  bool visible(int64_t tq, int64_t tk) const {
    return (!causal || tk <= tq) && (qdoc == nullptr || kdoc[tk] == qdoc[tq]);
  }
  // The tile [q0, q0+nq) x [k0, k0+nk) needs no mask: all keys precede all queries.
  bool tile_unmasked(int64_t q0, int64_t k0, int64_t nk) const {
    return qdoc == nullptr && (!causal || k0 + nk - 1 <= q0);
  }
};

// Dropout: mask numbering (heads, pitch), p and seed; head_offset places the
// local heads, q_pos0 and k_pos0 the block's first query and key in their
// sequence (ring attention's chunks; 0 for a whole sequence).
struct Dropout {
  detail::AttentionMask mask;
  int64_t head_offset;
  float p;
  uint64_t seed;
  int64_t q_pos0 = 0, k_pos0 = 0;
};

// In the per-pair helpers below, (b, h) only place the dropout mask: h is the
// global head of attention_dropout_index.

// Dropout multipliers of a tile into z (nq rows, stride kK).
void tile_dropout(float* z, int64_t b, int64_t h, const Dropout& dr, int64_t q0, int64_t nq, int64_t k0, int64_t nk) {
  const float keep_scale = detail::dropout_keep_scale(dr.p);
  const int64_t qp = dr.q_pos0 + q0, kp = dr.k_pos0 + k0;
  for (int64_t i = 0; i < nq; ++i)
    for (int64_t j = 0; j < nk; ++j)
      z[i * kK + j] = detail::dropout_multiplier(
          dr.seed, detail::attention_dropout_index(b, h, dr.mask, qp + i, kp + j), dr.p, keep_scale);
}

// Online-softmax update of one query tile against one key tile. S (nq, kK)
// holds scaled scores on entry and the unnormalised probabilities (before dropout)
// on exit; o (nq, D) is rescaled to the new running max.
void online_softmax_tile(float* S, float* o, float* row_max, float* row_sum, const Block& blk, int64_t q0, int64_t nq,
                         int64_t k0, int64_t nk, int64_t D) {
  const bool unmasked = blk.tile_unmasked(q0, k0, nk);
  for (int64_t i = 0; i < nq; ++i) {
    float* s = S + i * kK;
    const int64_t tq = q0 + i;
    if (!unmasked)
      for (int64_t j = 0; j < nk; ++j) s[j] = blk.visible(tq, k0 + j) ? s[j] : -INFINITY;
    float m_new = row_max[i];
#pragma omp simd reduction(max : m_new)
    for (int64_t j = 0; j < nk; ++j) m_new = s[j] > m_new ? s[j] : m_new;
    if (m_new == -INFINITY) {  // nothing visible yet in this row
      for (int64_t j = 0; j < nk; ++j) s[j] = 0.0f;
      continue;
    }
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < nk; ++j) {
      s[j] = detail::softmax_exp(s[j] - m_new);
      sum += s[j];
    }
    const float corr = detail::softmax_exp(row_max[i] - m_new);  // 0 on the first visible tile
    row_sum[i] = row_sum[i] * corr + sum;
    row_max[i] = m_new;
    if (corr != 1.0f)
      for (int64_t d = 0; d < D; ++d) o[i * D + d] *= corr;
  }
}

void flash_forward_pair(float* out, float* lse, const float* q, const float* k, const float* v, const Block& blk,
                        int64_t b, int64_t h, const Dropout& dr, int64_t D, float scale, float* task) {
  const int64_t T = blk.Tq;
  float* S = task;                        // (kQ, kK)
  float* row_max = task + kQ * kK;        // (kQ)
  float* row_sum = row_max + kQ;          // (kQ)
  float* kt = task + kForwardTaskFloats;  // keys, transposed per tile
  transpose_tiles(kt, k, blk.Tk, D);
  for (int64_t q0 = 0; q0 < T; q0 += kQ) {
    const int64_t nq = std::min(kQ, T - q0);
    float* o = out + q0 * D;  // (nq, D) accumulator
    std::fill(o, o + nq * D, 0.0f);
    std::fill(row_max, row_max + nq, -INFINITY);
    std::fill(row_sum, row_sum + nq, 0.0f);
    const int64_t k_end = blk.key_end(q0, nq);
    for (int64_t k0 = 0; k0 < k_end; k0 += kK) {
      const int64_t nk = std::min(kK, k_end - k0);
      gemm(false, false, nq, nk, D, scale, q + q0 * D, D, kt + k0 * D, kK, 0.0f, S, kK);
      online_softmax_tile(S, o, row_max, row_sum, blk, q0, nq, k0, nk, D);
      if (dr.p > 0.0f) {
        const float keep_scale = detail::dropout_keep_scale(dr.p);
        const int64_t qp = dr.q_pos0 + q0, kp = dr.k_pos0 + k0;
        for (int64_t i = 0; i < nq; ++i)
          for (int64_t j = 0; j < nk; ++j)
            S[i * kK + j] *= detail::dropout_multiplier(
                dr.seed, detail::attention_dropout_index(b, h, dr.mask, qp + i, kp + j), dr.p, keep_scale);
      }
      gemm(false, false, nq, D, nk, 1.0f, S, kK, v + k0 * D, D, 1.0f, o, D);
    }
    for (int64_t i = 0; i < nq; ++i) {
      // A row that sees no key (only in a non-diagonal block with documents)
      // contributes nothing: out 0 and lse -inf, the neutral element of a merge.
      const float inv = row_sum[i] > 0.0f ? 1.0f / row_sum[i] : 0.0f;
      for (int64_t d = 0; d < D; ++d) o[i * D + d] *= inv;
      lse[q0 + i] = row_sum[i] > 0.0f ? row_max[i] + std::log(row_sum[i]) : -INFINITY;
    }
  }
}

// One query tile of head h against all its visible key tiles, accumulating
// into dq (nq, D) and the group's dk, dv (Tk, D).
// kt, vt: the group's keys and values transposed per tile (transpose_tiles).
void flash_backward_qtile(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                          const float* kt, const float* vt, const float* out, const float* lse, const Block& blk,
                          int64_t b, int64_t h, const Dropout& dr, int64_t D, int64_t q0, float scale, float* task) {
  const int64_t nq = std::min(kQ, blk.Tq - q0);
  float* P = task;                 // (kQ, kK)
  float* dP = task + kQ * kK;      // (kQ, kK)
  float* Z = task + 2 * kQ * kK;   // (kQ, kK) dropout multipliers
  float* Di = task + 3 * kQ * kK;  // (kQ)
  const float* qt = q + q0 * D;
  const float* dot = dout + q0 * D;
  for (int64_t i = 0; i < nq; ++i) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t d = 0; d < D; ++d) s += dot[i * D + d] * out[(q0 + i) * D + d];
    Di[i] = s;
  }
  const int64_t k_end = blk.key_end(q0, nq);
  for (int64_t k0 = 0; k0 < k_end; k0 += kK) {
    const int64_t nk = std::min(kK, k_end - k0);
    const bool unmasked = blk.tile_unmasked(q0, k0, nk);
    gemm(false, false, nq, nk, D, scale, qt, D, kt + k0 * D, kK, 0.0f, P, kK);
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t tq = q0 + i;
      const float l = lse[tq];
      float* pr = P + i * kK;
      if (unmasked)
        for (int64_t j = 0; j < nk; ++j) pr[j] = detail::softmax_exp(pr[j] - l);
      else
        for (int64_t j = 0; j < nk; ++j) pr[j] = blk.visible(tq, k0 + j) ? detail::softmax_exp(pr[j] - l) : 0.0f;
    }
    const float* PV = P;  // the probabilities that multiplied v in forward
    if (dr.p > 0.0f) {
      tile_dropout(Z, b, h, dr, q0, nq, k0, nk);
      for (int64_t i = 0; i < nq; ++i)
        for (int64_t j = 0; j < nk; ++j) dP[i * kK + j] = P[i * kK + j] * Z[i * kK + j];
      PV = dP;
    }
    gemm(true, false, nk, D, nq, 1.0f, PV, kK, dot, D, 1.0f, dv + k0 * D, D);
    gemm(false, false, nq, nk, D, 1.0f, dot, D, vt + k0 * D, kK, 0.0f, dP, kK);
    for (int64_t i = 0; i < nq; ++i) {
      float* g = dP + i * kK;
      const float* pr = P + i * kK;
      if (dr.p > 0.0f)
        for (int64_t j = 0; j < nk; ++j) g[j] *= Z[i * kK + j];
      for (int64_t j = 0; j < nk; ++j) g[j] = pr[j] * (g[j] - Di[i]);
    }
    gemm(false, false, nq, D, nk, scale, dP, kK, k + k0 * D, D, 1.0f, dq + q0 * D, D);
    gemm(true, false, nk, D, nq, scale, dP, kK, qt, D, 1.0f, dk + k0 * D, D);
  }
}

// Where the rows live: pair (b, h) of q, out, lse, dout, dq starts at row
// pair * q_pitch, group (b, g) of k, v, dk, dv at row (b * G + g) * k_pitch;
// qdoc (B, q_pitch) and kdoc (B, k_pitch) are both null or both set.
struct Layout {
  int64_t B, H, G, D, q_pitch, k_pitch;
  const int32_t* qdoc;
  const int32_t* kdoc;
  Block block(int64_t b, int64_t Tq, int64_t Tk, bool causal) const {
    return Block{Tq, Tk, causal, qdoc ? qdoc + b * q_pitch : nullptr, kdoc ? kdoc + b * k_pitch : nullptr};
  }
};

void forward_blocks(float* out, float* lse, const float* q, const float* k, const float* v, const Layout& L, int64_t Tq,
                    int64_t Tk, bool causal, const Dropout& dr, float* scratch) {
  const int64_t B = L.B, H = L.H, D = L.D, R = H / L.G;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
#pragma omp parallel for schedule(dynamic) if (B * H * Tq * Tk * D > kParallelWork)
  for (int64_t pair = 0; pair < B * H; ++pair) {
    const int64_t b = pair / H, h = pair % H, kv = b * L.G + h / R;
    flash_forward_pair(out + pair * L.q_pitch * D, lse + pair * L.q_pitch, q + pair * L.q_pitch * D,
                       k + kv * L.k_pitch * D, v + kv * L.k_pitch * D, L.block(b, Tq, Tk, causal), b,
                       dr.head_offset + h, dr, D, scale,
                       scratch + scratch_slot(pair, B * H) * forward_task_floats(Tk, D));
  }
}

// accumulate: add into dq, dk, dv; otherwise overwrite them.
void backward_blocks(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k, const float* v,
                     const float* out, const float* lse, const Layout& L, int64_t Tq, int64_t Tk, bool causal,
                     const Dropout& dr, float* scratch, bool accumulate) {
  const int64_t B = L.B, H = L.H, G = L.G, D = L.D, R = H / G;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // One task per (b, g): it owns dk, dv of the group and the dq of its R
  // heads, and walks heads and tiles in a fixed order (deterministic).
#pragma omp parallel for schedule(dynamic) if (B * H * Tq * Tk * D > kParallelWork)
  for (int64_t bg = 0; bg < B * G; ++bg) {
    const int64_t b = bg / G, g = bg % G;
    float* dkg = dk + bg * L.k_pitch * D;
    float* dvg = dv + bg * L.k_pitch * D;
    float* task = scratch + scratch_slot(bg, B * G) * backward_task_floats(Tk, D);
    float* kt = task + kBackwardTaskFloats;  // keys, transposed per tile
    float* vt = kt + tiled_floats(Tk, D);    // values, likewise
    transpose_tiles(kt, k + bg * L.k_pitch * D, Tk, D);
    transpose_tiles(vt, v + bg * L.k_pitch * D, Tk, D);
    if (!accumulate) {
      std::fill(dkg, dkg + Tk * D, 0.0f);
      std::fill(dvg, dvg + Tk * D, 0.0f);
    }
    const Block blk = L.block(b, Tq, Tk, causal);
    for (int64_t r = 0; r < R; ++r) {
      const int64_t h = g * R + r, pair = b * H + h;
      float* dqp = dq + pair * L.q_pitch * D;
      if (!accumulate) std::fill(dqp, dqp + Tq * D, 0.0f);
      for (int64_t q0 = 0; q0 < Tq; q0 += kQ)
        flash_backward_qtile(dqp, dkg, dvg, dout + pair * L.q_pitch * D, q + pair * L.q_pitch * D,
                             k + bg * L.k_pitch * D, kt, vt, out + pair * L.q_pitch * D, lse + pair * L.q_pitch, blk, b,
                             dr.head_offset + h, dr, D, q0, scale, task);
    }
  }
}

// A block kernel as the profiler and cost model see it: `gemms` Tq x Tk x D
// GEMMs per head (flops over full blocks; the cost model runs only the
// blocks a causal diagonal keeps).
profiler::Region block_region(const char* name, KernelKind kind, int64_t B, int64_t H, int64_t Tq, int64_t Tk,
                              int64_t D, int gemms, bool causal, double elems_per_row_d) {
  return profiler::attention_kernel(name, kind, B, H, Tq, Tk, D, gemms, causal, B * H * Tq * (elems_per_row_d * D + 1));
}

// The kernels' Dropout of a ring block's BlockDropout on H local heads.
Dropout block_dropout(const BlockDropout& d, int64_t H) {
  if (d.p > 0.0f && d.pitch <= 0)
    throw Error(ExitCode::kInternal, "attention_flash_block: dropout needs the numbering's pitch");
  return Dropout{{detail::attention_dropout_heads(H, d.head_offset, d.total_heads), d.pitch},
                 d.head_offset,
                 d.p,
                 d.seed,
                 d.q_pos0,
                 d.k_pos0};
}

}  // namespace

void attention_flash_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                             const int32_t* doc_ids, int64_t B, int64_t H, int64_t G, int64_t T, int64_t D,
                             float dropout_p, uint64_t seed, float* scratch, int64_t head_offset, int64_t total_heads,
                             int64_t mask_seq) {
  profiler::Scope prof(profiler::attention_kernel("attention_flash_forward", KernelKind::kFlashForward, B, H, T, T, D,
                                                  2, /*causal=*/true, B * H * T * (4.0 * D + 1)));
  if (profiler::shape_only()) return;
  const Dropout dr{{detail::attention_dropout_heads(H, head_offset, total_heads), std::max(T, mask_seq)},
                   head_offset,
                   dropout_p,
                   seed};
  forward_blocks(out, lse, q, k, v, Layout{B, H, G, D, T, T, doc_ids, doc_ids}, T, T, /*causal=*/true, dr, scratch);
}

void attention_flash_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                              const float* v, const float* out, const float* lse, const int32_t* doc_ids, int64_t B,
                              int64_t H, int64_t G, int64_t T, int64_t D, float dropout_p, uint64_t seed,
                              float* scratch, int64_t head_offset, int64_t total_heads, int64_t mask_seq) {
  profiler::Scope prof(profiler::attention_kernel("attention_flash_backward", KernelKind::kFlashBackward, B, H, T, T, D,
                                                  5,
                                                  /*causal=*/true, B * H * T * (8.0 * D + 1)));
  if (profiler::shape_only()) return;
  const Dropout dr{{detail::attention_dropout_heads(H, head_offset, total_heads), std::max(T, mask_seq)},
                   head_offset,
                   dropout_p,
                   seed};
  backward_blocks(dq, dk, dv, dout, q, k, v, out, lse, Layout{B, H, G, D, T, T, doc_ids, doc_ids}, T, T,
                  /*causal=*/true, dr, scratch, /*accumulate=*/false);
}

int64_t attention_flash_scratch_floats(int64_t B, int64_t H, int64_t G, int64_t T, int64_t D) {
  return std::max(B * H * forward_task_floats(T, D), B * G * backward_task_floats(T, D));
}

void attention_flash_block_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                                   const int32_t* q_doc, const int32_t* k_doc, int64_t B, int64_t H, int64_t G,
                                   int64_t Tq, int64_t Tk, int64_t D, int64_t q_pitch, int64_t k_pitch, BlockMask mask,
                                   float* scratch, const BlockDropout& dropout) {
  profiler::Scope prof(block_region("attention_flash_block_forward", KernelKind::kFlashForward, B, H, Tq, Tk, D, 2,
                                    mask == BlockMask::kCausal, 4.0));
  if (profiler::shape_only()) return;
  if (mask == BlockMask::kHidden) {  // every row sees no key of this block
    for (int64_t pair = 0; pair < B * H; ++pair) {
      std::fill(out + pair * q_pitch * D, out + (pair * q_pitch + Tq) * D, 0.0f);
      std::fill(lse + pair * q_pitch, lse + pair * q_pitch + Tq, -INFINITY);
    }
    return;
  }
  forward_blocks(out, lse, q, k, v, Layout{B, H, G, D, q_pitch, k_pitch, q_doc, k_doc}, Tq, Tk,
                 mask != BlockMask::kVisible, block_dropout(dropout, H), scratch);
}

void attention_flash_block_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                                    const float* v, const float* out, const float* lse, const int32_t* q_doc,
                                    const int32_t* k_doc, int64_t B, int64_t H, int64_t G, int64_t Tq, int64_t Tk,
                                    int64_t D, int64_t q_pitch, int64_t k_pitch, BlockMask mask, float* scratch,
                                    const BlockDropout& dropout) {
  profiler::Scope prof(block_region("attention_flash_block_backward", KernelKind::kFlashBackward, B, H, Tq, Tk, D, 5,
                                    mask == BlockMask::kCausal, 8.0));
  if (profiler::shape_only() || mask == BlockMask::kHidden) return;  // hidden: no gradient flows through it
  backward_blocks(dq, dk, dv, dout, q, k, v, out, lse, Layout{B, H, G, D, q_pitch, k_pitch, q_doc, k_doc}, Tq, Tk,
                  mask != BlockMask::kVisible, block_dropout(dropout, H), scratch, /*accumulate=*/true);
}

int64_t attention_flash_block_scratch_floats(int64_t B, int64_t H, int64_t G, int64_t Tk, int64_t D) {
  return attention_flash_scratch_floats(B, H, G, Tk, D);
}

void attention_lse_merge(float* out, float* lse, const float* block_out, const float* block_lse, int64_t rows,
                         int64_t D) {
  for (int64_t r = 0; r < rows; ++r) {
    const float l1 = lse[r], l2 = block_lse[r];
    if (l2 == -INFINITY) continue;  // the block saw nothing for this row
    const float m = std::max(l1, l2);
    const float l = m + std::log(std::exp(l1 - m) + std::exp(l2 - m));
    const float w1 = std::exp(l1 - l), w2 = std::exp(l2 - l);
    for (int64_t d = 0; d < D; ++d) out[r * D + d] = out[r * D + d] * w1 + block_out[r * D + d] * w2;
    lse[r] = l;
  }
}

}  // namespace mtrain::kernels
