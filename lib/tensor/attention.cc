// Layout shuffles (qkv split, head merge) and the unfused attention path,
// which materialises the (T, T) scores of every (b, h) pair the way eager
// PyTorch does. The flash path lives in attention_flash.cc.
#include "tensor/attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "profiler/kernel_region.h"
#include "tensor/kernel_util.h"

namespace mtrain::kernels {
namespace {

constexpr int64_t kParallelMin = 16384;
// Passes over the (T, T) score tensor of one head as a device runs unfused
// attention (Megatron's core attention: baddbmm, fused scale-mask-softmax,
// dropout, bmm), in elements read plus written. Forward: the scores written
// (1), softmax reads them and writes the probabilities (2), dropout reads
// those and writes the dropped ones (2), the context GEMM reads them (1).
// Backward: the probabilities' gradient written (1), dropout's backward
// reads and writes it (2), softmax's backward reads it and the
// probabilities and writes the scores' gradient (3), the two GEMMs read
// that (2). What mtrain's CPU kernel moves is less (it fuses the passes).
constexpr double kUnfusedForwardScorePasses = 6.0;
constexpr double kUnfusedBackwardScorePasses = 8.0;
// Multiply-adds of one attention call below which a parallel region costs
// more than it saves (tiny calls run on the calling thread).
constexpr int64_t kParallelWork = int64_t{1} << 18;

// Visible entries of row tq of a (T, T) score block, scaled, softmaxed in one
// pass; invisible entries are written as 0. On entry row holds raw q·k.
void masked_softmax_row_fused(float* row, const int32_t* doc, int64_t tq, int64_t T, float scale) {
  const int32_t dq = doc ? doc[tq] : 0;
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int64_t tk = 0; tk <= tq; ++tk) {
    const float z = (doc == nullptr || doc[tk] == dq) ? row[tk] * scale : -INFINITY;
    m = z > m ? z : m;
  }
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t tk = 0; tk <= tq; ++tk) {
    const float e = (doc == nullptr || doc[tk] == dq) ? detail::softmax_exp(row[tk] * scale - m) : 0.0f;
    row[tk] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
  for (int64_t tk = 0; tk <= tq; ++tk) row[tk] *= inv;
  for (int64_t tk = tq + 1; tk < T; ++tk) row[tk] = 0.0f;
}

// Scale, mask fill and softmax as three passes over the (T, T) block s; the
// result goes to p.
void masked_softmax_unfused(float* p, float* s, const int32_t* doc, int64_t T, float scale) {
  for (int64_t e = 0; e < T * T; ++e) s[e] *= scale;
  for (int64_t tq = 0; tq < T; ++tq) {
    float* z = s + tq * T;
    const int32_t dq = doc ? doc[tq] : 0;
    for (int64_t tk = 0; tk < T; ++tk) z[tk] = (tk <= tq && (doc == nullptr || doc[tk] == dq)) ? z[tk] : -INFINITY;
  }
  for (int64_t tq = 0; tq < T; ++tq) {
    const float* z = s + tq * T;
    float* out = p + tq * T;
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t tk = 0; tk < T; ++tk) m = z[tk] > m ? z[tk] : m;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t tk = 0; tk < T; ++tk) {
      out[tk] = detail::softmax_exp(z[tk] - m);
      sum += out[tk];
    }
    const float inv = 1.0f / sum;
    for (int64_t tk = 0; tk < T; ++tk) out[tk] *= inv;
  }
}

// dst (T, T) = src * dropout multipliers of pair (b, h).
void apply_attention_dropout(float* dst, const float* src, int64_t b, int64_t h, const detail::AttentionMask& H,
                             int64_t T, float p, uint64_t seed) {
  const float keep_scale = detail::dropout_keep_scale(p);
  for (int64_t tq = 0; tq < T; ++tq)
    for (int64_t tk = 0; tk < T; ++tk)
      dst[tq * T + tk] = src[tq * T + tk] * detail::dropout_multiplier(
                                                seed, detail::attention_dropout_index(b, h, H, tq, tk), p, keep_scale);
}

// c (M, N) = alpha * op(a) · op(b) + beta * c, row-major, leading dims given.
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t lda, const float* b,
          int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(M),
              static_cast<int>(N), static_cast<int>(K), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}

}  // namespace

void qkv_split_forward(float* q, float* k, float* v, const float* qkv, int64_t B, int64_t T, int64_t G, int64_t R,
                       int64_t D) {
  if (profiler::shape_only()) return;  // a dry run's step: no data
  const int64_t H = G * R, W = G * (R + 2) * D;
#pragma omp parallel for schedule(static) if (B * T * W > kParallelMin)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t b = bt / T, t = bt % T;
    for (int64_t g = 0; g < G; ++g) {
      const float* src = qkv + bt * W + g * (R + 2) * D;
      for (int64_t r = 0; r < R; ++r)
        std::memcpy(q + ((b * H + g * R + r) * T + t) * D, src + r * D, D * sizeof(float));
      std::memcpy(k + ((b * G + g) * T + t) * D, src + R * D, D * sizeof(float));
      std::memcpy(v + ((b * G + g) * T + t) * D, src + (R + 1) * D, D * sizeof(float));
    }
  }
}

void qkv_split_backward(float* dqkv, const float* dq, const float* dk, const float* dv, int64_t B, int64_t T, int64_t G,
                        int64_t R, int64_t D) {
  if (profiler::shape_only()) return;  // a dry run's step: no data
  const int64_t H = G * R, W = G * (R + 2) * D;
#pragma omp parallel for schedule(static) if (B * T * W > kParallelMin)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t b = bt / T, t = bt % T;
    for (int64_t g = 0; g < G; ++g) {
      float* dst = dqkv + bt * W + g * (R + 2) * D;
      for (int64_t r = 0; r < R; ++r)
        std::memcpy(dst + r * D, dq + ((b * H + g * R + r) * T + t) * D, D * sizeof(float));
      std::memcpy(dst + R * D, dk + ((b * G + g) * T + t) * D, D * sizeof(float));
      std::memcpy(dst + (R + 1) * D, dv + ((b * G + g) * T + t) * D, D * sizeof(float));
    }
  }
}

void heads_merge_forward(float* out, const float* inp, int64_t B, int64_t H, int64_t T, int64_t D) {
  if (profiler::shape_only()) return;  // a dry run's step: no data
#pragma omp parallel for schedule(static) if (B * H * T * D > kParallelMin)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t b = bt / T, t = bt % T;
    for (int64_t h = 0; h < H; ++h)
      std::memcpy(out + bt * H * D + h * D, inp + ((b * H + h) * T + t) * D, D * sizeof(float));
  }
}

void heads_merge_backward(float* dinp, const float* dout, int64_t B, int64_t H, int64_t T, int64_t D) {
  if (profiler::shape_only()) return;  // a dry run's step: no data
#pragma omp parallel for schedule(static) if (B * H * T * D > kParallelMin)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t b = bt / T, t = bt % T;
    for (int64_t h = 0; h < H; ++h)
      std::memcpy(dinp + ((b * H + h) * T + t) * D, dout + bt * H * D + h * D, D * sizeof(float));
  }
}

void attention_unfused_forward(float* out, float* probs, const float* q, const float* k, const float* v,
                               const int32_t* doc_ids, int64_t B, int64_t H, int64_t G, int64_t T, int64_t D,
                               float dropout_p, uint64_t seed, bool masked_softmax_fusion, float* scratch,
                               int64_t head_offset, int64_t total_heads, int64_t mask_seq) {
  profiler::Scope prof(
      profiler::attention_kernel("attention_unfused_forward", KernelKind::kUnfusedAttention, B, H, T, T, D, 2,
                                 /*causal=*/false, B * H * T * (4.0 * D + kUnfusedForwardScorePasses * T)));
  if (profiler::shape_only()) return;
  const int64_t R = H / G;
  const detail::AttentionMask H_mask{detail::attention_dropout_heads(H, head_offset, total_heads),
                                     std::max(T, mask_seq)};
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // One (b, h) pair per task; BLAS runs single-threaded inside the region.
#pragma omp parallel for schedule(dynamic) if (B * H * T * T * D > kParallelWork)
  for (int64_t pair = 0; pair < B * H; ++pair) {
    const int64_t b = pair / H, h = pair % H, kv = b * G + h / R;
    const int32_t* doc = doc_ids ? doc_ids + b * T : nullptr;
    float* P = probs + pair * T * T;    // (T, T)
    float* S = scratch + pair * T * T;  // (T, T): masked scores, then dropped probabilities
    const float* qh = q + pair * T * D;
    const float* kg = k + kv * T * D;
    const float* vg = v + kv * T * D;
    if (masked_softmax_fusion) {
      gemm(false, true, T, T, D, 1.0f, qh, D, kg, D, 0.0f, P, T);
      for (int64_t tq = 0; tq < T; ++tq) masked_softmax_row_fused(P + tq * T, doc, tq, T, scale);
    } else {
      gemm(false, true, T, T, D, 1.0f, qh, D, kg, D, 0.0f, S, T);
      masked_softmax_unfused(P, S, doc, T, scale);
    }
    const float* PV = P;
    if (dropout_p > 0.0f) {
      apply_attention_dropout(S, P, b, head_offset + h, H_mask, T, dropout_p, seed);
      PV = S;
    }
    gemm(false, false, T, D, T, 1.0f, PV, T, vg, D, 0.0f, out + pair * T * D, D);
  }
}

void attention_unfused_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                                const float* v, const float* probs, const int32_t* doc_ids, int64_t B, int64_t H,
                                int64_t G, int64_t T, int64_t D, float dropout_p, uint64_t seed, float* scratch,
                                int64_t head_offset, int64_t total_heads, int64_t mask_seq) {
  profiler::Scope prof(
      profiler::attention_kernel("attention_unfused_backward", KernelKind::kUnfusedAttention, B, H, T, T, D, 4,
                                 /*causal=*/false, B * H * T * (7.0 * D + kUnfusedBackwardScorePasses * T)));
  if (profiler::shape_only()) return;
  (void)doc_ids;  // invisible entries have probs == 0, so the mask is already in probs
  const int64_t R = H / G;
  const detail::AttentionMask H_mask{detail::attention_dropout_heads(H, head_offset, total_heads),
                                     std::max(T, mask_seq)};
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const float keep_scale = detail::dropout_keep_scale(dropout_p);
  // dv (b, g) = sum over the group's heads, in head order, of dropped(P)^T · dout.
#pragma omp parallel for schedule(dynamic) if (B * H * T * T * D > kParallelWork)
  for (int64_t bg = 0; bg < B * G; ++bg) {
    const int64_t b = bg / G, g = bg % G;
    for (int64_t r = 0; r < R; ++r) {
      const int64_t h = g * R + r, pair = b * H + h;
      const float* PV = probs + pair * T * T;
      if (dropout_p > 0.0f) {
        apply_attention_dropout(scratch + pair * T * T, PV, b, head_offset + h, H_mask, T, dropout_p, seed);
        PV = scratch + pair * T * T;
      }
      gemm(true, false, T, D, T, 1.0f, PV, T, dout + pair * T * D, D, r == 0 ? 0.0f : 1.0f, dv + bg * T * D, D);
    }
  }
  // Per (b, h): dS = P ∘ (dP - rowsum(dP ∘ P)) * scale into scratch, then dq.
#pragma omp parallel for schedule(dynamic) if (B * H * T * T * D > kParallelWork)
  for (int64_t pair = 0; pair < B * H; ++pair) {
    const int64_t b = pair / H, h = pair % H, kv = b * G + h / R;
    const float* P = probs + pair * T * T;
    float* dS = scratch + pair * T * T;  // (T, T)
    gemm(false, true, T, T, D, 1.0f, dout + pair * T * D, D, v + kv * T * D, D, 0.0f, dS, T);
    for (int64_t tq = 0; tq < T; ++tq) {
      float* row = dS + tq * T;
      const float* prow = P + tq * T;
      if (dropout_p > 0.0f)
        for (int64_t tk = 0; tk <= tq; ++tk)
          row[tk] *= detail::dropout_multiplier(
              seed, detail::attention_dropout_index(b, head_offset + h, H_mask, tq, tk), dropout_p, keep_scale);
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t tk = 0; tk <= tq; ++tk) dot += row[tk] * prow[tk];
      for (int64_t tk = 0; tk < T; ++tk) row[tk] = prow[tk] * (row[tk] - dot) * scale;
    }
    gemm(false, false, T, D, T, 1.0f, dS, T, k + kv * T * D, D, 0.0f, dq + pair * T * D, D);
  }
  // dk (b, g) = sum over the group's heads, in head order, of dS^T · q.
#pragma omp parallel for schedule(dynamic) if (B * H * T * T * D > kParallelWork)
  for (int64_t bg = 0; bg < B * G; ++bg) {
    const int64_t b = bg / G, g = bg % G;
    for (int64_t r = 0; r < R; ++r) {
      const int64_t pair = b * H + g * R + r;
      gemm(true, false, T, D, T, 1.0f, scratch + pair * T * T, T, q + pair * T * D, D, r == 0 ? 0.0f : 1.0f,
           dk + bg * T * D, D);
    }
  }
}

int64_t attention_unfused_scratch_floats(int64_t B, int64_t H, int64_t G, int64_t T, int64_t D) {
  (void)G;
  (void)D;
  return B * H * T * T;
}

}  // namespace mtrain::kernels
