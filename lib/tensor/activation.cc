#include "tensor/activation.h"

#include <cmath>

#include "tensor/kernel_util.h"

namespace mtrain::kernels {
namespace {

constexpr int64_t kParallelMin = 16384;        // elements below which a parallel region is not worth it
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluC = 0.044715f;

inline float sigmoid(float a) { return 1.0f / (1.0f + std::exp(-a)); }

inline float gelu_tanh_arg(float x) { return kGeluK * (x + kGeluC * (x * x * x)); }

// d gelu(x) / dx given t = tanh(gelu_tanh_arg(x)).
inline float gelu_grad(float x, float t) {
  return 0.5f * (1.0f + t) + 0.5f * x * ((1.0f - t * t) * (kGeluK * (1.0f + 3.0f * kGeluC * (x * x))));
}

// dst (N, F) = src (N, F, row stride ld) + bias (F) (or a copy if bias is null).
void add_bias(float* dst, const float* src, const float* bias, int64_t N, int64_t F, int64_t ld) {
#pragma omp parallel for schedule(static) if (N * F > kParallelMin)
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < F; ++j) dst[i * F + j] = src[i * ld + j] + (bias ? bias[j] : 0.0f);
}

}  // namespace

// ---- SwiGLU ------------------------------------------------------------------------------------

void bias_swiglu_forward(float* out, const float* inp, const float* bias, int64_t N, int64_t F, bool fused,
                         float* scratch) {
  const int64_t n = N * F;
  if (fused) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < N; ++i) {
      const float* gate = inp + i * 2 * F;
      const float* up = gate + F;
      for (int64_t j = 0; j < F; ++j) {
        const float a = gate[j] + (bias ? bias[j] : 0.0f);
        const float b = up[j] + (bias ? bias[F + j] : 0.0f);
        out[i * F + j] = (a * sigmoid(a)) * b;
      }
    }
    return;
  }
  float* a = scratch;          // gate + bias (N, F)
  float* b = scratch + n;      // up + bias (N, F)
  float* s = scratch + 2 * n;  // silu(a) (N, F)
  add_bias(a, inp, bias, N, F, 2 * F);
  add_bias(b, inp + F, bias ? bias + F : nullptr, N, F, 2 * F);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t e = 0; e < n; ++e) s[e] = a[e] * sigmoid(a[e]);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t e = 0; e < n; ++e) out[e] = s[e] * b[e];
}

void bias_swiglu_backward(float* dinp, float* dbias, const float* dout, const float* inp, const float* bias, int64_t N,
                          int64_t F, bool fused, float* scratch) {
  const int64_t n = N * F;
  if (fused) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < N; ++i) {
      const float* gate = inp + i * 2 * F;
      const float* up = gate + F;
      float* dgate = dinp + i * 2 * F;
      float* dup = dgate + F;
      for (int64_t j = 0; j < F; ++j) {
        const float a = gate[j] + (bias ? bias[j] : 0.0f);
        const float b = up[j] + (bias ? bias[F + j] : 0.0f);
        const float s = sigmoid(a), dy = dout[i * F + j];
        dup[j] = dy * (a * s);
        dgate[j] = (dy * b) * (s * (1.0f + a * (1.0f - s)));
      }
    }
  } else {
    float* a = scratch;          // gate + bias (N, F)
    float* b = scratch + n;      // up + bias, then d silu(a) (N, F)
    float* s = scratch + 2 * n;  // sigmoid(a) (N, F)
    add_bias(a, inp, bias, N, F, 2 * F);
    add_bias(b, inp + F, bias ? bias + F : nullptr, N, F, 2 * F);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t e = 0; e < n; ++e) s[e] = sigmoid(a[e]);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < N; ++i)  // mul backward, up side
      for (int64_t j = 0; j < F; ++j) dinp[i * 2 * F + F + j] = dout[i * F + j] * (a[i * F + j] * s[i * F + j]);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t e = 0; e < n; ++e) b[e] = dout[e] * b[e];  // mul backward, gate side
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < N; ++i)  // silu backward
      for (int64_t j = 0; j < F; ++j) {
        const int64_t e = i * F + j;
        dinp[i * 2 * F + j] = b[e] * (s[e] * (1.0f + a[e] * (1.0f - s[e])));
      }
  }
  if (dbias) detail::column_sums_accumulate(dbias, dinp, N, 2 * F, 2 * F);
}

// ---- GELU (tanh approximation) -----------------------------------------------------------------

void bias_gelu_forward(float* out, const float* inp, const float* bias, int64_t N, int64_t F, bool fused,
                       float* scratch) {
  const int64_t n = N * F;
  if (fused) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < F; ++j) {
        const float x = inp[i * F + j] + (bias ? bias[j] : 0.0f);
        out[i * F + j] = 0.5f * x * (1.0f + std::tanh(gelu_tanh_arg(x)));
      }
    return;
  }
  float* x = scratch;      // inp + bias (N, F)
  float* t = scratch + n;  // x^3, then the tanh argument, then tanh (N, F)
  add_bias(x, inp, bias, N, F, F);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t e = 0; e < n; ++e) t[e] = x[e] * x[e] * x[e];
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t e = 0; e < n; ++e) t[e] = kGeluK * (x[e] + kGeluC * t[e]);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t e = 0; e < n; ++e) t[e] = std::tanh(t[e]);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t e = 0; e < n; ++e) out[e] = 0.5f * x[e] * (1.0f + t[e]);
}

void bias_gelu_backward(float* dinp, float* dbias, const float* dout, const float* inp, const float* bias, int64_t N,
                        int64_t F, bool fused, float* scratch) {
  const int64_t n = N * F;
  if (fused) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < F; ++j) {
        const float x = inp[i * F + j] + (bias ? bias[j] : 0.0f);
        dinp[i * F + j] = dout[i * F + j] * gelu_grad(x, std::tanh(gelu_tanh_arg(x)));
      }
  } else {
    float* x = scratch;      // inp + bias (N, F)
    float* t = scratch + n;  // tanh argument, tanh, then local derivative (N, F)
    add_bias(x, inp, bias, N, F, F);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t e = 0; e < n; ++e) t[e] = gelu_tanh_arg(x[e]);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t e = 0; e < n; ++e) t[e] = std::tanh(t[e]);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t e = 0; e < n; ++e) t[e] = gelu_grad(x[e], t[e]);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t e = 0; e < n; ++e) dinp[e] = dout[e] * t[e];
  }
  if (dbias) detail::column_sums_accumulate(dbias, dinp, N, F, F);
}

// ---- Dropout -----------------------------------------------------------------------------------

void bias_dropout_add_forward(float* out, const float* inp, const float* bias, const float* residual, int64_t N,
                              int64_t C, float p, uint64_t seed, bool fused, float* scratch) {
  const int64_t n = N * C;
  const float keep_scale = detail::dropout_keep_scale(p);
  if (fused) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < N; ++i) {
      if (p > 0.0f) {
        for (int64_t j = 0; j < C; ++j) {
          const int64_t e = i * C + j;
          const float v = inp[e] + (bias ? bias[j] : 0.0f);
          out[e] = residual[e] + v * detail::dropout_multiplier(seed, static_cast<uint64_t>(e), p, keep_scale);
        }
      } else {
        for (int64_t j = 0; j < C; ++j)
          out[i * C + j] = residual[i * C + j] + (inp[i * C + j] + (bias ? bias[j] : 0.0f));
      }
    }
    return;
  }
  float* v = scratch;  // (N, C): inp + bias, then dropout in place
  add_bias(v, inp, bias, N, C, C);
  if (p > 0.0f) dropout_forward(v, v, n, p, seed);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t e = 0; e < n; ++e) out[e] = residual[e] + v[e];
}

void bias_dropout_add_backward(float* dinp, float* dbias, const float* dout, int64_t N, int64_t C, float p,
                               uint64_t seed) {
  dropout_backward(dinp, dout, N * C, p, seed);
  if (dbias) detail::column_sums_accumulate(dbias, dinp, N, C, C);
}

void dropout_forward(float* out, const float* inp, int64_t n, float p, uint64_t seed) {
  if (p <= 0.0f) {
    if (out != inp)
#pragma omp parallel for schedule(static) if (n > kParallelMin)
      for (int64_t e = 0; e < n; ++e) out[e] = inp[e];
    return;
  }
  const float keep_scale = detail::dropout_keep_scale(p);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t e = 0; e < n; ++e)
    out[e] = inp[e] * detail::dropout_multiplier(seed, static_cast<uint64_t>(e), p, keep_scale);
}

void dropout_backward(float* din, const float* dout, int64_t n, float p, uint64_t seed) {
  dropout_forward(din, dout, n, p, seed);  // the mask is its own adjoint
}

int64_t bias_swiglu_scratch_floats(int64_t N, int64_t F) { return 3 * N * F; }
int64_t bias_gelu_scratch_floats(int64_t N, int64_t F) { return 2 * N * F; }
int64_t bias_dropout_add_scratch_floats(int64_t N, int64_t C) { return N * C; }

}  // namespace mtrain::kernels
