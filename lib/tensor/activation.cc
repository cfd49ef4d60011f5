#include "tensor/activation.h"

#include <cmath>

#include "profiler/kernel_region.h"
#include "tensor/kernel_util.h"

namespace mtrain::kernels {
namespace {

constexpr int64_t kParallelMin = 16384;        // elements below which a parallel region is not worth it
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluC = 0.044715f;

// Vectorisable sigmoid and tanh (kernel_util.h): the same function in the
// fused and unfused paths, so both stay within rounding of each other.
inline float sigmoid(float a) { return detail::vec_sigmoid(a); }
inline float tanh_f(float u) { return detail::vec_tanh(u); }

inline float gelu_tanh_arg(float x) { return kGeluK * (x + kGeluC * (x * x * x)); }

// Steps of the unfused paths, shown as ops nested in the op that calls the
// kernel (the precision dumper takes dtype and TP partition from it).
inline profiler::Region op_step(const char* name, profiler::Pass pass = profiler::Pass::kForward) {
  return {profiler::Kind::kOp, pass, name};
}
inline profiler::TensorRef step_ref(const char* role, const float* p, int64_t rows, int64_t cols) {
  return profiler::tensor_2d(role, p, rows, cols, "float32");
}

// d gelu(x) / dx given t = tanh(gelu_tanh_arg(x)).
inline float gelu_grad(float x, float t) {
  return 0.5f * (1.0f + t) + 0.5f * x * ((1.0f - t * t) * (kGeluK * (1.0f + 3.0f * kGeluC * (x * x))));
}

// Bias element j, or 0 without a bias. Adding 0.0f (rather than skipping the
// add) keeps the fused paths bit-identical to add_bias below, signed zeros
// included. Templated on the bias so the row loops vectorise (a per-element
// null test defeats GCC's vectoriser).
template <bool kBias>
inline float bias_at(const float* bias, int64_t j) {
  if constexpr (kBias) {
    return bias[j];
  } else {
    return 0.0f;
  }
}

template <bool kBias>
void swiglu_forward_rows(float* out, const float* inp, const float* bias, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static) if (N * F > kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    const float* __restrict gate = inp + i * 2 * F;
    const float* __restrict up = gate + F;
    float* __restrict o = out + i * F;
    for (int64_t j = 0; j < F; ++j) {
      const float a = gate[j] + bias_at<kBias>(bias, j);
      const float b = up[j] + bias_at<kBias>(bias, F + j);
      o[j] = (a * sigmoid(a)) * b;
    }
  }
}

template <bool kBias>
void swiglu_backward_rows(float* dinp, const float* dout, const float* inp, const float* bias, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static) if (N * F > kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    const float* __restrict gate = inp + i * 2 * F;
    const float* __restrict up = gate + F;
    const float* __restrict dy = dout + i * F;
    float* __restrict dgate = dinp + i * 2 * F;
    float* __restrict dup = dgate + F;
    for (int64_t j = 0; j < F; ++j) {
      const float a = gate[j] + bias_at<kBias>(bias, j);
      const float b = up[j] + bias_at<kBias>(bias, F + j);
      const float s = sigmoid(a);
      dup[j] = dy[j] * (a * s);
      dgate[j] = (dy[j] * b) * (s * (1.0f + a * (1.0f - s)));
    }
  }
}

template <bool kBias>
void gelu_forward_rows(float* out, const float* inp, const float* bias, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static) if (N * F > kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    const float* __restrict in = inp + i * F;
    float* __restrict o = out + i * F;
    for (int64_t j = 0; j < F; ++j) {
      const float x = in[j] + bias_at<kBias>(bias, j);
      o[j] = 0.5f * x * (1.0f + tanh_f(gelu_tanh_arg(x)));
    }
  }
}

template <bool kBias>
void gelu_backward_rows(float* dinp, const float* dout, const float* inp, const float* bias, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static) if (N * F > kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    const float* __restrict in = inp + i * F;
    const float* __restrict dy = dout + i * F;
    float* __restrict dx = dinp + i * F;
    for (int64_t j = 0; j < F; ++j) {
      const float x = in[j] + bias_at<kBias>(bias, j);
      dx[j] = dy[j] * gelu_grad(x, tanh_f(gelu_tanh_arg(x)));
    }
  }
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
  profiler::Scope prof(profiler::elementwise_kernel("bias_swiglu_forward", 5.0 * N * F, 8.0 * N * F));
  if (profiler::shape_only()) return;
  const int64_t n = N * F;
  if (fused) {
    if (bias)
      swiglu_forward_rows<true>(out, inp, bias, N, F);
    else
      swiglu_forward_rows<false>(out, inp, bias, N, F);
    return;
  }
  float* a = scratch;          // gate + bias (N, F)
  float* b = scratch + n;      // up + bias (N, F)
  float* s = scratch + 2 * n;  // silu(a) (N, F)
  profiler::Scope step_bias(op_step("bias_add"), {step_ref("input", inp, N, 2 * F)});
  add_bias(a, inp, bias, N, F, 2 * F);
  add_bias(b, inp + F, bias ? bias + F : nullptr, N, F, 2 * F);
  step_bias.end({step_ref("gate", a, N, F), step_ref("up", b, N, F)});
  profiler::Scope step_silu(op_step("silu"), {step_ref("input", a, N, F)});
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t e = 0; e < n; ++e) s[e] = a[e] * sigmoid(a[e]);
  step_silu.end({step_ref("output", s, N, F)});
  profiler::Scope step_mul(op_step("mul"), {step_ref("input", s, N, F), step_ref("up", b, N, F)});
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t e = 0; e < n; ++e) out[e] = s[e] * b[e];
  step_mul.end({step_ref("output", out, N, F)});
}

void bias_swiglu_backward(float* dinp, float* dbias, const float* dout, const float* inp, const float* bias, int64_t N,
                          int64_t F, bool fused, float* scratch) {
  profiler::Scope prof(profiler::elementwise_kernel("bias_swiglu_backward", 7.0 * N * F, 14.0 * N * F));
  if (profiler::shape_only()) return;
  const int64_t n = N * F;
  if (fused) {
    if (bias)
      swiglu_backward_rows<true>(dinp, dout, inp, bias, N, F);
    else
      swiglu_backward_rows<false>(dinp, dout, inp, bias, N, F);
  } else {
    float* a = scratch;          // gate + bias (N, F)
    float* b = scratch + n;      // up + bias, then d silu(a) (N, F)
    float* s = scratch + 2 * n;  // sigmoid(a) (N, F)
    add_bias(a, inp, bias, N, F, 2 * F);
    add_bias(b, inp + F, bias ? bias + F : nullptr, N, F, 2 * F);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t e = 0; e < n; ++e) s[e] = sigmoid(a[e]);
    profiler::Scope step_mul(op_step("mul", profiler::Pass::kBackward), {step_ref("grad_output", dout, N, F)});
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < N; ++i)  // mul backward, up side
      for (int64_t j = 0; j < F; ++j) dinp[i * 2 * F + F + j] = dout[i * F + j] * (a[i * F + j] * s[i * F + j]);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t e = 0; e < n; ++e) b[e] = dout[e] * b[e];  // mul backward, gate side
    step_mul.end({step_ref("grad_input", b, N, F)});
    profiler::Scope step_silu(op_step("silu", profiler::Pass::kBackward), {step_ref("grad_output", b, N, F)});
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < N; ++i)  // silu backward
      for (int64_t j = 0; j < F; ++j) {
        const int64_t e = i * F + j;
        dinp[i * 2 * F + j] = b[e] * (s[e] * (1.0f + a[e] * (1.0f - s[e])));
      }
    step_silu.end({step_ref("grad_input", dinp, N, 2 * F)});
  }
  if (dbias) detail::column_sums_accumulate(dbias, dinp, N, 2 * F, 2 * F);
}

// ---- GELU (tanh approximation) -----------------------------------------------------------------

void bias_gelu_forward(float* out, const float* inp, const float* bias, int64_t N, int64_t F, bool fused,
                       float* scratch) {
  profiler::Scope prof(profiler::elementwise_kernel("bias_gelu_forward", 3.0 * N * F, 10.0 * N * F));
  if (profiler::shape_only()) return;
  const int64_t n = N * F;
  if (fused) {
    if (bias)
      gelu_forward_rows<true>(out, inp, bias, N, F);
    else
      gelu_forward_rows<false>(out, inp, bias, N, F);
    return;
  }
  float* x = scratch;      // inp + bias (N, F)
  float* t = scratch + n;  // x^3, then the tanh argument, then tanh (N, F)
  profiler::Scope step_bias(op_step("bias_add"), {step_ref("input", inp, N, F)});
  add_bias(x, inp, bias, N, F, F);
  step_bias.end({step_ref("output", x, N, F)});
  profiler::Scope step_gelu(op_step("gelu"), {step_ref("input", x, N, F)});
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t e = 0; e < n; ++e) t[e] = x[e] * x[e] * x[e];
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t e = 0; e < n; ++e) t[e] = kGeluK * (x[e] + kGeluC * t[e]);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t e = 0; e < n; ++e) t[e] = tanh_f(t[e]);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t e = 0; e < n; ++e) out[e] = 0.5f * x[e] * (1.0f + t[e]);
  step_gelu.end({step_ref("output", out, N, F)});
}

void bias_gelu_backward(float* dinp, float* dbias, const float* dout, const float* inp, const float* bias, int64_t N,
                        int64_t F, bool fused, float* scratch) {
  profiler::Scope prof(profiler::elementwise_kernel("bias_gelu_backward", 4.0 * N * F, 16.0 * N * F));
  if (profiler::shape_only()) return;
  const int64_t n = N * F;
  if (fused) {
    if (bias)
      gelu_backward_rows<true>(dinp, dout, inp, bias, N, F);
    else
      gelu_backward_rows<false>(dinp, dout, inp, bias, N, F);
  } else {
    float* x = scratch;      // inp + bias (N, F)
    float* t = scratch + n;  // tanh argument, tanh, then local derivative (N, F)
    add_bias(x, inp, bias, N, F, F);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t e = 0; e < n; ++e) t[e] = gelu_tanh_arg(x[e]);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t e = 0; e < n; ++e) t[e] = tanh_f(t[e]);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t e = 0; e < n; ++e) t[e] = gelu_grad(x[e], t[e]);
    profiler::Scope step(op_step("gelu", profiler::Pass::kBackward), {step_ref("grad_output", dout, N, F)});
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t e = 0; e < n; ++e) dinp[e] = dout[e] * t[e];
    step.end({step_ref("grad_input", dinp, N, F)});
  }
  if (dbias) detail::column_sums_accumulate(dbias, dinp, N, F, F);
}

// ---- Dropout -----------------------------------------------------------------------------------

void bias_dropout_add_forward(float* out, const float* inp, const float* bias, const float* residual, int64_t N,
                              int64_t C, float p, uint64_t seed, bool fused, float* scratch,
                              const TokenNumbering& rows) {
  profiler::Scope prof(profiler::elementwise_kernel("bias_dropout_add_forward", 4.0 * N * C, 3.0 * N * C));
  if (profiler::shape_only()) return;
  const int64_t n = N * C;
  const float keep_scale = detail::dropout_keep_scale(p);
  if (fused) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < N; ++i) {
      if (p > 0.0f) {
        const int64_t base = numbered_token(rows, i) * C;
        for (int64_t j = 0; j < C; ++j) {
          const int64_t e = i * C + j;
          const float v = inp[e] + (bias ? bias[j] : 0.0f);
          out[e] = residual[e] + v * detail::dropout_multiplier(seed, static_cast<uint64_t>(base + j), p, keep_scale);
        }
      } else {
        for (int64_t j = 0; j < C; ++j)
          out[i * C + j] = residual[i * C + j] + (inp[i * C + j] + (bias ? bias[j] : 0.0f));
      }
    }
    return;
  }
  float* v = scratch;  // (N, C): inp + bias, then dropout in place
  {
    profiler::Scope step(op_step("bias_add"), {step_ref("input", inp, N, C)});
    add_bias(v, inp, bias, N, C, C);
    step.end({step_ref("output", v, N, C)});
  }
  if (p > 0.0f) {
    profiler::Scope step(op_step("dropout"), {step_ref("input", v, N, C)});
    dropout_forward(v, v, N, C, p, seed, rows);
    step.end({step_ref("output", v, N, C)});
  }
  profiler::Scope step(op_step("residual_add"), {step_ref("input", v, N, C), step_ref("residual", residual, N, C)});
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t e = 0; e < n; ++e) out[e] = residual[e] + v[e];
  step.end({step_ref("output", out, N, C)});
}

void bias_dropout_add_backward(float* dinp, float* dbias, const float* dout, int64_t N, int64_t C, float p,
                               uint64_t seed, const TokenNumbering& rows) {
  profiler::Scope prof(profiler::elementwise_kernel("bias_dropout_add_backward", 3.0 * N * C, 2.0 * N * C));
  if (profiler::shape_only()) return;
  dropout_backward(dinp, dout, N, C, p, seed, rows);
  if (dbias) detail::column_sums_accumulate(dbias, dinp, N, C, C);
}

void dropout_forward(float* out, const float* inp, int64_t N, int64_t C, float p, uint64_t seed,
                     const TokenNumbering& rows) {
  const int64_t n = N * C;
  profiler::Scope prof(profiler::elementwise_kernel("dropout_forward", 2.0 * n, 2.0 * n));
  if (profiler::shape_only()) return;
  if (p <= 0.0f) {
    if (out != inp)
#pragma omp parallel for schedule(static) if (n > kParallelMin)
      for (int64_t e = 0; e < n; ++e) out[e] = inp[e];
    return;
  }
  const float keep_scale = detail::dropout_keep_scale(p);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    const int64_t base = numbered_token(rows, i) * C;
    for (int64_t j = 0; j < C; ++j)
      out[i * C + j] =
          inp[i * C + j] * detail::dropout_multiplier(seed, static_cast<uint64_t>(base + j), p, keep_scale);
  }
}

void dropout_backward(float* din, const float* dout, int64_t N, int64_t C, float p, uint64_t seed,
                      const TokenNumbering& rows) {
  dropout_forward(din, dout, N, C, p, seed, rows);  // the mask is its own adjoint
}

int64_t bias_swiglu_scratch_floats(int64_t N, int64_t F) { return 3 * N * F; }
int64_t bias_gelu_scratch_floats(int64_t N, int64_t F) { return 2 * N * F; }
int64_t bias_dropout_add_scratch_floats(int64_t N, int64_t C) { return N * C; }

}  // namespace mtrain::kernels
