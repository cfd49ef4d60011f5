#include "tensor/cross_entropy.h"

#include <cmath>

#include "profiler/kernel_region.h"
#include "tensor/kernel_util.h"

namespace mtrain::kernels {
namespace {

constexpr int64_t kParallelMin = 16384;

float row_max(const float* x, int64_t V) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < V; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

// One pass per row for the exponentials over the real columns [0, Vr) of each
// row (stride V); stats (N, 2) = (max, log-sum-exp).
void cross_entropy_forward_fused(float* losses, float* stats, const float* logits, const int32_t* targets, int64_t N,
                                 int64_t V, int64_t Vr) {
#pragma omp parallel for schedule(static) if (N * V > kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = logits + i * V;
    const float m = row_max(x, Vr);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < Vr; ++j) sum += detail::softmax_exp(x[j] - m);
    const float lse = m + std::log(sum);
    losses[i] = lse - x[targets[i]];
    stats[2 * i] = m;
    stats[2 * i + 1] = lse;
  }
}

// max -> sub -> exp/sum -> log -> sub (log_softmax of the real columns into
// logp (N, Vr), contiguous), then gather.
void cross_entropy_forward_unfused(float* losses, float* stats, const float* logits, const int32_t* targets, int64_t N,
                                   int64_t V, int64_t Vr, float* logp /* (N, Vr) */) {
  const bool par = N * V > kParallelMin;
  // Its steps, shown as ops nested in the cross_entropy op (precision dumper).
  profiler::Scope step_lsm({profiler::Kind::kOp, profiler::Pass::kForward, "log_softmax"},
                           {profiler::tensor_2d("input", logits, N, V, "float32")});
#pragma omp parallel for schedule(static) if (par)
  for (int64_t i = 0; i < N; ++i) {
    const float m = row_max(logits + i * V, Vr);
    for (int64_t j = 0; j < Vr; ++j) logp[i * Vr + j] = logits[i * V + j] - m;
    if (stats) stats[2 * i] = m;
  }
#pragma omp parallel for schedule(static) if (par)
  for (int64_t i = 0; i < N; ++i) {
    const float* z = logp + i * Vr;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < Vr; ++j) sum += detail::softmax_exp(z[j]);
    const float log_sum = std::log(sum);
    for (int64_t j = 0; j < Vr; ++j) logp[i * Vr + j] -= log_sum;
    if (stats) stats[2 * i + 1] = stats[2 * i] + log_sum;
  }
  step_lsm.end({profiler::tensor_2d("output", logp, N, Vr, "float32")});
  profiler::Scope step_nll({profiler::Kind::kOp, profiler::Pass::kForward, "nll_loss"},
                           {profiler::tensor_2d("input", logp, N, Vr, "float32")});
  for (int64_t i = 0; i < N; ++i) losses[i] = -logp[i * Vr + targets[i]];
  step_nll.end({profiler::tensor_2d("output", losses, N, 1, "float32")});
}

}  // namespace

void cross_entropy_forward(float* losses, float* stats, const float* logits, const int32_t* targets, int64_t N,
                           int64_t V, int64_t Vr, bool fused, float* scratch) {
  profiler::Scope prof(profiler::elementwise_kernel("cross_entropy_forward", 1.0 * N * V + 3.0 * N, 4.0 * N * V));
  if (profiler::shape_only()) return;
  if (fused)
    cross_entropy_forward_fused(losses, stats, logits, targets, N, V, Vr);
  else
    cross_entropy_forward_unfused(losses, stats, logits, targets, N, V, Vr, scratch);
}

void cross_entropy_backward(float* dlogits, const float* logits, const float* stats, const int32_t* targets,
                            const float* dlosses, int64_t N, int64_t V, int64_t Vr, bool fused, const float* scratch) {
  profiler::Scope prof(profiler::elementwise_kernel("cross_entropy_backward", 2.0 * N * V + 3.0 * N, 4.0 * N * V));
  if (profiler::shape_only()) return;
  const bool par = N * V > kParallelMin;
  if (fused) {
    // softmax recomputed from the logits and the saved lse; one write per
    // element, reading logit j before writing gradient j (so they may alias).
#pragma omp parallel for schedule(static) if (par)
    for (int64_t i = 0; i < N; ++i) {
      const float lse = stats[2 * i + 1], dl = dlosses[i];
      const int64_t t = targets[i];
      const float* x = logits + i * V;
      float* g = dlogits + i * V;
      for (int64_t j = 0; j < Vr; ++j) g[j] = dl * (detail::softmax_exp(x[j] - lse) - (j == t ? 1.0f : 0.0f));
      for (int64_t j = Vr; j < V; ++j) g[j] = 0.0f;  // padded ids: -inf logits have no gradient
    }
    return;
  }
  // exp(log_softmax) -> subtract the one-hot -> scale by dlosses; padded columns 0.
#pragma omp parallel for schedule(static) if (par)
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t j = 0; j < Vr; ++j) dlogits[i * V + j] = detail::softmax_exp(scratch[i * Vr + j]);
    for (int64_t j = Vr; j < V; ++j) dlogits[i * V + j] = 0.0f;
  }
  for (int64_t i = 0; i < N; ++i) dlogits[i * V + targets[i]] -= 1.0f;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < Vr; ++j) dlogits[i * V + j] *= dlosses[i];
}

int64_t cross_entropy_scratch_floats(int64_t N, int64_t V) { return N * V; }

}  // namespace mtrain::kernels
