// Kernel regions (profiler/probe.h, Kind::kKernel) with the work the simulated
// NPU's cost model needs: one line at the top of a kernel,
//   profiler::Scope prof(profiler::gemm_kernel("linear_forward", N, OC, C));
// Bytes count the elements a kernel reads and writes at the model's compute
// dtype (set per thread by the profiler; host storage is always fp32). When
// nobody listens for kernels the helpers return at once.
#pragma once

#include <cstdint>

#include "profiler/probe.h"

namespace mtrain::profiler {

namespace detail {
extern thread_local int t_compute_dtype_bytes;  // 4 unless set
extern thread_local bool t_shape_only;          // false unless set
}  // namespace detail
// The element size kernels of this thread account bytes at (2 for bf16/fp16).
inline void set_compute_dtype_bytes(int bytes) { detail::t_compute_dtype_bytes = bytes; }
inline int compute_dtype_bytes() { return detail::t_compute_dtype_bytes; }

// Shape-only execution (a dry run's training step on meta tensors): every
// kernel opens its region, so its FLOPs and bytes are reported, and returns
// before touching memory; code outside kernels that reads or writes tensor
// data skips that work under the same predicate. One flag per thread rather
// than "data() == nullptr" because null is also a kernel's "no such output".
inline bool shape_only() { return detail::t_shape_only; }
class ShapeOnlyScope {
 public:
  ShapeOnlyScope() : old_(detail::t_shape_only) { detail::t_shape_only = true; }
  ~ShapeOnlyScope() { detail::t_shape_only = old_; }
  ShapeOnlyScope(const ShapeOnlyScope&) = delete;
  ShapeOnlyScope& operator=(const ShapeOnlyScope&) = delete;

 private:
  bool old_;
};

// C (m, n) = A (m, k) · B (k, n): 2mnk flops, (mk + kn + mn) elements moved.
inline Region gemm_kernel(const char* name, int64_t m, int64_t n, int64_t k) {
  Region r{Kind::kKernel, Pass::kNone, name};
  if (!listening(Kind::kKernel)) return r;
  KernelWork& w = r.work;
  w.kind = KernelKind::kGemm;
  w.m = m;
  w.n = n;
  w.k = k;
  w.flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  w.bytes = (static_cast<double>(m) * k + static_cast<double>(k) * n + static_cast<double>(m) * n) *
            detail::t_compute_dtype_bytes;
  return r;
}

// `groups` GEMMs of one expert each (MoE's grouped GEMM), M rows in all,
// spread over the groups along m (rows_dim 'm': C_g (M_g, n) = A_g (M_g, k)
// · B_g) or along k (rows_dim 'k': the weight gradient, C_g (m, n) = A_g^T
// (m, M_g) · B_g (M_g, n)). The cost model prices them by the per-group
// shape, each group's own tiles (KernelWork batch = groups, the rows split
// evenly: the dry run's routing is not data's); FLOPs and bytes count the
// M rows exactly, each group's weight once.
inline Region grouped_gemm_kernel(const char* name, int64_t groups, char rows_dim, int64_t M, int64_t m, int64_t n,
                                  int64_t k) {
  Region r{Kind::kKernel, Pass::kNone, name};
  if (!listening(Kind::kKernel)) return r;
  const int64_t g = groups > 0 ? groups : 1, per = (M + g - 1) / g;
  KernelWork& w = r.work;
  w.kind = KernelKind::kGemm;
  w.batch = g;
  w.m = rows_dim == 'm' ? per : m;
  w.n = n;
  w.k = rows_dim == 'm' ? k : per;
  const double rows = static_cast<double>(M);
  const double other = static_cast<double>(rows_dim == 'm' ? k : m);  // the weight's other dimension
  w.flops = 2.0 * rows * static_cast<double>(n) * other;
  w.bytes = (rows * other + static_cast<double>(g) * other * n + rows * n) * detail::t_compute_dtype_bytes;
  return r;
}

// A pass over memory: `elements` read plus written, `flops` of arithmetic.
inline Region elementwise_kernel(const char* name, double elements, double flops) {
  Region r{Kind::kKernel, Pass::kNone, name};
  if (!listening(Kind::kKernel)) return r;
  r.work.flops = flops;
  r.work.bytes = elements * detail::t_compute_dtype_bytes;
  return r;
}

// A pass over memory whose operands have different element sizes (the
// optimizer's fp32 states beside 16-bit model params): `bytes` read plus
// written, counted by the caller, not at the compute dtype.
inline Region memory_kernel(const char* name, double bytes, double flops) {
  Region r{Kind::kKernel, Pass::kNone, name};
  if (!listening(Kind::kKernel)) return r;
  r.work.flops = flops;
  r.work.bytes = bytes;
  return r;
}

// An attention kernel over B·H heads of Tq queries and Tk keys of head dim D
// with `gemms` Tq×Tk×D GEMMs per head (flops counted over full blocks; a
// causal one runs only the blocks on or below the diagonal, which the cost
// model counts); `elements` read plus written. `kind`: flash forward or
// backward, or unfused (its GEMMs plus the score tensor's passes).
inline Region attention_kernel(const char* name, KernelKind kind, int64_t B, int64_t H, int64_t Tq, int64_t Tk,
                               int64_t D, int gemms, bool causal, double elements) {
  Region r = elementwise_kernel(name, elements, 2.0 * gemms * static_cast<double>(B * H) * Tq * Tk * D);
  if (!listening(Kind::kKernel)) return r;
  KernelWork& w = r.work;
  w.kind = kind;
  w.m = Tq;
  w.n = Tk;
  w.k = D;
  w.batch = B * H;
  w.causal = causal;
  return r;
}

}  // namespace mtrain::profiler
