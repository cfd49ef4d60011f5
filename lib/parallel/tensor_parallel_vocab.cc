// The vocab-parallel layers of tensor_parallel.h: the embedding (masked
// lookup + all-reduce or reduce-scatter) and the cross-entropy whose softmax
// spans every TP rank's vocabulary slice. With one TP rank (and vocab_start
// 0) they call the single-device kernels; the sharded loops repeat those
// kernels' operations (kernel_util.h's softmax_exp, the same per-row order)
// so the only differences are the cross-rank sums.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "common/errors.h"
#include "parallel/tensor_parallel.h"
#include "profiler/kernel_region.h"
#include "profiler/probe.h"
#include "tensor/cross_entropy.h"
#include "tensor/embedding.h"
#include "tensor/kernel_util.h"

namespace mtrain::parallel {
namespace {

constexpr int64_t kParallelMin = 16384;  // as in lib/tensor's embedding and cross-entropy kernels
constexpr int64_t kColumnBlock = 64;     // columns per task of the deterministic embedding scatter

int group_size(const TpConfig& tp) { return tp.tp == nullptr ? 1 : tp.tp->size(); }

// Every id must be in [0, vocab): the padded vocabulary for embeddings, the ids that take part in the softmax for
// targets.
void check_ids(const int32_t* ids, int64_t N, int64_t vocab, const char* who, const char* what) {
  if (profiler::shape_only()) return;  // a dry run's step has no token ids
  for (int64_t i = 0; i < N; ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      throw Error(ExitCode::kInternal, std::string(who) + ": " + what + " " + std::to_string(ids[i]) + " at " +
                                           std::to_string(i) + " is outside the vocabulary [0, " +
                                           std::to_string(vocab) + ")");
}

// Columns of this slice [vocab_start, vocab_start + V_local) below vocab_size: they take part in the softmax,
// the rest are padded ids (masked). A slice may hold none.
int64_t real_columns(int64_t vocab_size, int64_t vocab_start, int64_t V_local) {
  return std::clamp<int64_t>(vocab_size - vocab_start, 0, V_local);
}

// out (N, C): row i = w[tokens[i] - vocab_start] if the token is in this slice, else zeros.
void embedding_rows_masked(float* out, const int32_t* tokens, const float* w, int64_t N, int64_t C, int64_t vocab_start,
                           int64_t V_local) {
  if (profiler::shape_only()) return;
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_start;
    float* o = out + i * C;
    if (row < 0 || row >= V_local) {
      for (int64_t j = 0; j < C; ++j) o[j] = 0.0f;
    } else {
      const float* te = w + row * C;
      for (int64_t j = 0; j < C; ++j) o[j] = te[j];
    }
  }
}

// dw (V_local, C) += rows of g (N, C) for the tokens in this slice. Like kernels::embedding_backward, each task
// owns a block of columns and walks the tokens in order: no races, same sums for any thread count.
void embedding_scatter_masked(float* dw, const float* g, const int32_t* tokens, int64_t N, int64_t C,
                              int64_t vocab_start, int64_t V_local) {
  if (profiler::shape_only()) return;
  const int64_t nblocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kColumnBlock, nc = std::min(C, c0 + kColumnBlock) - c0;
    for (int64_t i = 0; i < N; ++i) {
      const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_start;
      if (row < 0 || row >= V_local) continue;
      const float* gi = g + i * C + c0;
      float* d = dw + row * C + c0;
      for (int64_t j = 0; j < nc; ++j) d[j] += gi[j];
    }
  }
}

float row_max(const float* x, int64_t V) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < V; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

float row_sum_exp(const float* x, float shift, int64_t V) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < V; ++j) sum += kernels::detail::softmax_exp(x[j] - shift);
  return sum;
}

// losses (N) = the global row max over the real columns [0, Vr) of each row (stride V) of every TP rank
// (all-reduce max; -inf from a slice without real columns).
void global_row_max(Comm& tp, float* losses, const float* logits, int64_t N, int64_t V, int64_t Vr) {
  if (!profiler::shape_only()) {  // a dry run's step: the collectives only
#pragma omp parallel for schedule(static) if (N * V > kParallelMin)
    for (int64_t i = 0; i < N; ++i) losses[i] = row_max(logits + i * V, Vr);
  }
  tp.all_reduce(losses, N, ReduceOp::kMax);
}

// Fused: stats (N, 2) first carries this slice's (sum of exp, target logit or 0), all-reduced in one call, then
// the (max, log-sum-exp) the backward needs. Only the real columns [0, Vr) enter the sums.
void ce_forward_fused(Comm& tp, float* losses, float* stats, const float* logits, const int32_t* targets, int64_t N,
                      int64_t V, int64_t Vr, int64_t vocab_start) {
  global_row_max(tp, losses, logits, N, V, Vr);
  if (!profiler::shape_only()) {  // a dry run's step: the collectives only
#pragma omp parallel for schedule(static) if (N * V > kParallelMin)
    for (int64_t i = 0; i < N; ++i) {
      const float* x = logits + i * V;
      const int64_t t = static_cast<int64_t>(targets[i]) - vocab_start;
      stats[2 * i] = row_sum_exp(x, losses[i], Vr);
      stats[2 * i + 1] = (t >= 0 && t < V) ? x[t] : 0.0f;
    }
  }
  tp.all_reduce_sum(stats, 2 * N);
  if (!profiler::shape_only()) {  // a dry run's step: the collectives only
    for (int64_t i = 0; i < N; ++i) {
      const float m = losses[i], lse = m + std::log(stats[2 * i]);
      losses[i] = lse - stats[2 * i + 1];
      stats[2 * i] = m;
      stats[2 * i + 1] = lse;
    }
  }
}

// Unfused: max -> sub -> exp/sum -> log -> sub into logp (N, Vr) (the real columns, contiguous), then the
// target's log-probability; losses (N) carries each all-reduced quantity in turn.
void ce_forward_unfused(Comm& tp, float* losses, float* stats, const float* logits, const int32_t* targets, int64_t N,
                        int64_t V, int64_t Vr, int64_t vocab_start, float* logp) {
  const bool par = N * V > kParallelMin;
  // Its steps, shown as ops nested in the cross_entropy op (precision dumper),
  // under the names the single-device kernel uses.
  profiler::Scope step_lsm({profiler::Kind::kOp, profiler::Pass::kForward, "log_softmax"},
                           {profiler::tensor_2d("input", logits, N, V, "float32")});
  global_row_max(tp, losses, logits, N, V, Vr);
  if (!profiler::shape_only()) {  // a dry run's step: the collectives only
#pragma omp parallel for schedule(static) if (par)
    for (int64_t i = 0; i < N; ++i) {
      const float m = losses[i];
      for (int64_t j = 0; j < Vr; ++j) logp[i * Vr + j] = logits[i * V + j] - m;
      if (stats) stats[2 * i] = m;
      losses[i] = row_sum_exp(logp + i * Vr, 0.0f, Vr);
    }
  }
  tp.all_reduce_sum(losses, N);
  if (!profiler::shape_only()) {  // a dry run's step: the collectives only
#pragma omp parallel for schedule(static) if (par)
    for (int64_t i = 0; i < N; ++i) {
      const float log_sum = std::log(losses[i]);
      for (int64_t j = 0; j < Vr; ++j) logp[i * Vr + j] -= log_sum;
      if (stats) stats[2 * i + 1] = stats[2 * i] + log_sum;
    }
  }
  step_lsm.end({profiler::tensor_2d("output", logp, N, Vr, "float32")});
  profiler::Scope step_nll({profiler::Kind::kOp, profiler::Pass::kForward, "nll_loss"},
                           {profiler::tensor_2d("input", logp, N, Vr, "float32")});
  if (!profiler::shape_only()) {  // a dry run's step: the collectives only
    for (int64_t i = 0; i < N; ++i) {
      const int64_t t = static_cast<int64_t>(targets[i]) - vocab_start;
      losses[i] = (t >= 0 && t < Vr) ? -logp[i * Vr + t] : 0.0f;
    }
  }
  tp.all_reduce_sum(losses, N);
  step_nll.end({profiler::tensor_2d("output", losses, N, 1, "float32")});
}

}  // namespace

void vocab_parallel_embedding_forward(const TpConfig& tp, float* out, float* out_full, const int32_t* tokens,
                                      const float* w, int64_t N, int64_t C, int64_t vocab_start, int64_t V_local) {
  constexpr const char* kWho = "vocab_parallel_embedding_forward";
  const int p = group_size(tp);
  const bool sp = tp.sequence_parallel && p > 1;
  check_ids(tokens, N, V_local * p, kWho, "token");
  if (sp && ((out_full == nullptr && !profiler::shape_only()) || N % p != 0))
    throw Error(ExitCode::kInternal, std::string(kWho) + ": sequence parallelism needs out_full and N (" +
                                         std::to_string(N) + ") divisible by the TP size");
  float* full = sp ? out_full : out;  // (N, C): this rank's rows, zeros elsewhere
  if (p == 1 && vocab_start == 0) {
    kernels::embedding_forward(full, tokens, nullptr, w, nullptr, N, C);
    return;
  }
  embedding_rows_masked(full, tokens, w, N, C, vocab_start, V_local);
  if (sp)
    sp_reduce_scatter(*tp.tp, out_full, out, N / p * C, tp.wire);
  else if (p > 1)
    tp.tp->all_reduce_sum(out, N * C, tp.wire);
}

void vocab_parallel_embedding_backward(const TpConfig& tp, float* dw, float* dout_full, const float* dout,
                                       const int32_t* tokens, int64_t N, int64_t C, int64_t vocab_start,
                                       int64_t V_local) {
  constexpr const char* kWho = "vocab_parallel_embedding_backward";
  if (dw == nullptr) return;  // frozen table: nothing to compute (a dry run's trainable dw is a token)
  const int p = group_size(tp);
  check_ids(tokens, N, V_local * p, kWho, "token");
  const float* g = dout;  // (N, C): the gradient of every token's embedding
  if (tp.sequence_parallel && p > 1) {
    if ((dout_full == nullptr && !profiler::shape_only()) || N % p != 0)
      throw Error(ExitCode::kInternal, std::string(kWho) + ": sequence parallelism needs dout_full and N (" +
                                           std::to_string(N) + ") divisible by the TP size");
    sp_all_gather(*tp.tp, dout, dout_full, N / p * C, tp.wire);
    g = dout_full;
  }
  if (p == 1 && vocab_start == 0)
    kernels::embedding_backward(dw, nullptr, g, tokens, nullptr, N, C);
  else
    embedding_scatter_masked(dw, g, tokens, N, C, vocab_start, V_local);
}

void vocab_parallel_cross_entropy_forward(Comm& tp, float* losses, float* stats, const float* logits,
                                          const int32_t* targets, int64_t N, int64_t V_local, int64_t vocab_start,
                                          int64_t vocab_size, bool fused, float* scratch) {
  constexpr const char* kWho = "vocab_parallel_cross_entropy_forward";
  if (vocab_size < 1 || vocab_size > V_local * tp.size())
    throw Error(ExitCode::kInternal, std::string(kWho) + ": vocab_size " + std::to_string(vocab_size) +
                                         " is outside [1, padded vocabulary " + std::to_string(V_local * tp.size()) +
                                         "]");
  check_ids(targets, N, vocab_size, kWho, "target");
  if (!profiler::shape_only() && ((fused && stats == nullptr) || (!fused && scratch == nullptr && N * V_local > 0)))
    throw Error(ExitCode::kInternal, std::string(kWho) + ": " + (fused ? "stats" : "scratch") + " is null");
  const int64_t Vr = real_columns(vocab_size, vocab_start, V_local);
  if (tp.size() == 1 && vocab_start == 0)
    kernels::cross_entropy_forward(losses, stats, logits, targets, N, V_local, Vr, fused, scratch);
  else if (fused)
    ce_forward_fused(tp, losses, stats, logits, targets, N, V_local, Vr, vocab_start);
  else
    ce_forward_unfused(tp, losses, stats, logits, targets, N, V_local, Vr, vocab_start, scratch);
}

void vocab_parallel_cross_entropy_backward(float* dlogits, const float* logits, const float* stats,
                                           const int32_t* targets, const float* dlosses, int64_t N, int64_t V_local,
                                           int64_t vocab_start, int64_t vocab_size, bool fused, const float* scratch) {
  const int64_t V = V_local, Vr = real_columns(vocab_size, vocab_start, V_local);
  const bool par = N * V > kParallelMin;
  check_ids(targets, N, vocab_size, "vocab_parallel_cross_entropy_backward", "target");
  if (profiler::shape_only()) return;  // no kernel region: nothing to report
  if (fused) {
    // softmax from the logits and the global lse; logit j is read before gradient j is written (may alias).
#pragma omp parallel for schedule(static) if (par)
    for (int64_t i = 0; i < N; ++i) {
      const float lse = stats[2 * i + 1], dl = dlosses[i];
      const int64_t t = static_cast<int64_t>(targets[i]) - vocab_start;  // outside [0, Vr): not in this slice
      const float* x = logits + i * V;
      float* g = dlogits + i * V;
      for (int64_t j = 0; j < Vr; ++j) g[j] = dl * (kernels::detail::softmax_exp(x[j] - lse) - (j == t ? 1.0f : 0.0f));
      for (int64_t j = Vr; j < V; ++j) g[j] = 0.0f;  // padded ids: -inf logits have no gradient
    }
    return;
  }
  // exp(log_softmax) -> subtract the one-hot (on the rank holding the target) -> scale by dlosses; padded ids 0.
#pragma omp parallel for schedule(static) if (par)
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t j = 0; j < Vr; ++j) dlogits[i * V + j] = kernels::detail::softmax_exp(scratch[i * Vr + j]);
    for (int64_t j = Vr; j < V; ++j) dlogits[i * V + j] = 0.0f;
  }
  for (int64_t i = 0; i < N; ++i) {
    const int64_t t = static_cast<int64_t>(targets[i]) - vocab_start;
    if (t >= 0 && t < Vr) dlogits[i * V + t] -= 1.0f;
  }
#pragma omp parallel for schedule(static) if (par)
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < Vr; ++j) dlogits[i * V + j] *= dlosses[i];
}

}  // namespace mtrain::parallel
