#include "tensor/norm.h"

#include <algorithm>
#include <cmath>

#include "profiler/kernel_region.h"
#include "tensor/kernel_util.h"

namespace mtrain::kernels {
namespace {

constexpr int64_t kParallelMin = 16384;  // below this many elements a parallel region costs more than it saves

float row_sum(const float* x, int64_t C) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < C; ++j) s += x[j];
  return s;
}

// dweight (C) += sum_i dout[i] * xhat[i], dbias (C) += sum_i dout[i], with
// xhat = (inp - mean) * rstd (mean null for RMSNorm). Blocks of columns per
// thread, rows in order: deterministic for any thread count.
void norm_param_grads(float* dweight, float* dbias, const float* dout, const float* inp, const float* mean,
                      const float* rstd, int64_t N, int64_t C) {
  if (dweight == nullptr && dbias == nullptr) return;  // frozen norm (LoRA): no parameter gradient
  constexpr int64_t kBlock = 256;
  const int64_t nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kBlock, nc = std::min(C, c0 + kBlock) - c0;
    float gw[kBlock], gb[kBlock];
    for (int64_t j = 0; j < nc; ++j) gw[j] = gb[j] = 0.0f;
    for (int64_t i = 0; i < N; ++i) {
      const float* dy = dout + i * C + c0;
      const float* x = inp + i * C + c0;
      const float m = mean ? mean[i] : 0.0f, rs = rstd[i];
      for (int64_t j = 0; j < nc; ++j) {
        gw[j] += dy[j] * ((x[j] - m) * rs);
        gb[j] += dy[j];
      }
    }
    if (dweight)
      for (int64_t j = 0; j < nc; ++j) dweight[c0 + j] += gw[j];
    if (dbias)
      for (int64_t j = 0; j < nc; ++j) dbias[c0 + j] += gb[j];
  }
}

void rmsnorm_forward_fused(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C,
                           float eps) {
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t j = 0; j < C; ++j) ss += x[j] * x[j];
    const float rs = 1.0f / std::sqrt(ss / static_cast<float>(C) + eps);
    float* y = out + i * C;
    for (int64_t j = 0; j < C; ++j) y[j] = (x[j] * rs) * weight[j];
    rstd[i] = rs;
  }
}

// pow -> mean -> rsqrt -> mul -> mul, each a full pass as in eager PyTorch.
void rmsnorm_forward_unfused(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C,
                             float eps, float* sq /* (N, C) */) {
  const int64_t n = N * C;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t e = 0; e < n; ++e) sq[e] = inp[e] * inp[e];
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < N; ++i) rstd[i] = row_sum(sq + i * C, C) / static_cast<float>(C);
  for (int64_t i = 0; i < N; ++i) rstd[i] = 1.0f / std::sqrt(rstd[i] + eps);
  float* normed = sq;  // (N, C), reuses the squares' buffer
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < C; ++j) normed[i * C + j] = inp[i * C + j] * rstd[i];
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < C; ++j) out[i * C + j] = normed[i * C + j] * weight[j];
}

void rmsnorm_backward_fused(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                            const float* rstd, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    const float* dy = dout + i * C;
    float dot = 0.0f;  // sum_j dy * w * x
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < C; ++j) dot += (dy[j] * weight[j]) * x[j];
    const float rs = rstd[i];
    const float coef = -(rs * rs * rs) * dot / static_cast<float>(C);
    float* dx = dinp + i * C;
    for (int64_t j = 0; j < C; ++j) dx[j] += (dy[j] * weight[j]) * rs + coef * x[j];
  }
  norm_param_grads(dweight, nullptr, dout, inp, nullptr, rstd, N, C);
}

// Autograd's op sequence in reverse: mul(w) -> mul(rstd) -> rsqrt -> mean -> pow.
// scratch: g (N, C) | t (N, C) | drstd (N).
void rmsnorm_backward_unfused(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                              const float* rstd, int64_t N, int64_t C, float* scratch) {
  const int64_t n = N * C;
  float* g = scratch;            // d(normed) (N, C)
  float* t = scratch + n;        // dout * normed, then reused (N, C)
  float* drs = scratch + 2 * n;  // d(rstd) then d(mean square) (N)
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < C; ++j) {
      g[i * C + j] = dout[i * C + j] * weight[j];
      t[i * C + j] = dout[i * C + j] * (inp[i * C + j] * rstd[i]);
    }
  if (dweight) detail::column_sums_accumulate(dweight, t, N, C, C);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t e = 0; e < n; ++e) t[e] = g[e] * inp[e];
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < N; ++i) drs[i] = row_sum(t + i * C, C);
  for (int64_t i = 0; i < N; ++i) drs[i] = drs[i] * (-0.5f * rstd[i] * rstd[i] * rstd[i]);  // rsqrt'
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < C; ++j) dinp[i * C + j] += g[i * C + j] * rstd[i];
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    const float dsq = drs[i] / static_cast<float>(C);                                  // mean'
    for (int64_t j = 0; j < C; ++j) dinp[i * C + j] += dsq * (2.0f * inp[i * C + j]);  // pow'
  }
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int64_t N, int64_t C, float eps) {
  profiler::Scope prof(profiler::elementwise_kernel("layernorm_forward", 2.0 * N * C + 2.0 * C, 7.0 * N * C));
  if (profiler::shape_only()) return;
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    const float m = row_sum(x, C) / static_cast<float>(C);
    float var = 0.0f;
#pragma omp simd reduction(+ : var)
    for (int64_t j = 0; j < C; ++j) var += (x[j] - m) * (x[j] - m);
    const float rs = 1.0f / std::sqrt(var / static_cast<float>(C) + eps);
    float* y = out + i * C;
    for (int64_t j = 0; j < C; ++j) y[j] = ((x[j] - m) * rs) * weight[j] + (bias ? bias[j] : 0.0f);
    mean[i] = m;
    rstd[i] = rs;
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  profiler::Scope prof(profiler::elementwise_kernel("layernorm_backward", 3.0 * N * C + 4.0 * C, 12.0 * N * C));
  if (profiler::shape_only()) return;
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    const float* dy = dout + i * C;
    const float m = mean[i], rs = rstd[i];
    float sum_dn = 0.0f, sum_dn_xhat = 0.0f;  // sums of dnorm and dnorm * xhat
#pragma omp simd reduction(+ : sum_dn, sum_dn_xhat)
    for (int64_t j = 0; j < C; ++j) {
      const float dn = dy[j] * weight[j];
      sum_dn += dn;
      sum_dn_xhat += dn * ((x[j] - m) * rs);
    }
    const float a = sum_dn / static_cast<float>(C), b = sum_dn_xhat / static_cast<float>(C);
    float* dx = dinp + i * C;
    for (int64_t j = 0; j < C; ++j) dx[j] += (dy[j] * weight[j] - a - ((x[j] - m) * rs) * b) * rs;
  }
  norm_param_grads(dweight, dbias, dout, inp, mean, rstd, N, C);
}

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C, float eps,
                     bool fused, float* scratch) {
  profiler::Scope prof(profiler::elementwise_kernel("rmsnorm_forward", 2.0 * N * C + C, 4.0 * N * C));
  if (profiler::shape_only()) return;
  if (fused)
    rmsnorm_forward_fused(out, rstd, inp, weight, N, C, eps);
  else
    rmsnorm_forward_unfused(out, rstd, inp, weight, N, C, eps, scratch);
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t N, int64_t C, bool fused, float* scratch) {
  profiler::Scope prof(profiler::elementwise_kernel("rmsnorm_backward", 3.0 * N * C + 2.0 * C, 9.0 * N * C));
  if (profiler::shape_only()) return;
  if (fused)
    rmsnorm_backward_fused(dinp, dweight, dout, inp, weight, rstd, N, C);
  else
    rmsnorm_backward_unfused(dinp, dweight, dout, inp, weight, rstd, N, C, scratch);
}

int64_t rmsnorm_scratch_floats(int64_t N, int64_t C) { return 2 * N * C + N; }

}  // namespace mtrain::kernels
