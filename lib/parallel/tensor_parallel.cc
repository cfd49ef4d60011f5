// Column- and row-parallel linears and the sequence-parallel gather/scatter
// (the vocab-parallel layers are in tensor_parallel_vocab.cc). The GEMMs are
// kernels::linear_forward / linear_backward on this rank's shard; with one TP
// rank no collective runs, so the bits are the single-device kernel's.
#include "parallel/tensor_parallel.h"

#include <algorithm>
#include <string>

#include "common/errors.h"
#include "profiler/kernel_region.h"
#include "tensor/linear.h"

namespace mtrain::parallel {
namespace {

constexpr int64_t kParallelMin = 32768;  // elements below which an OpenMP region costs more than it saves

int group_size(const TpConfig& tp) { return tp.tp == nullptr ? 1 : tp.tp->size(); }
bool sequence_parallel(const TpConfig& tp) { return tp.sequence_parallel && group_size(tp) > 1; }

// Elements of one rank's token shard of a (N, width) buffer; throws unless the tokens split evenly.
int64_t shard_elems(const TpConfig& tp, int64_t N, int64_t width, const char* who) {
  const int p = group_size(tp);
  if (N % p != 0)
    throw Error(ExitCode::kInternal, std::string(who) + ": sequence parallelism needs the token count (" +
                                         std::to_string(N) + ") divisible by the TP size (" + std::to_string(p) + ")");
  return N / p * width;
}

// A dry run's step (profiler::shape_only) passes meta buffers, which are null.
void require(bool ok, const char* who, const char* what) {
  if (!ok && !profiler::shape_only()) throw Error(ExitCode::kInternal, std::string(who) + ": " + what);
}

// dw (n) += src (n): the unfused gradient-accumulation add.
void accumulate(float* dw, const float* src, int64_t n) {
  if (profiler::shape_only()) return;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t e = 0; e < n; ++e) dw[e] += src[e];
}

// Weight gradient of out = inp · w^T: dw (OC, C) += dout^T · inp (and db, dinp as in linear_backward), either
// straight into dw or through scratch (OC*C floats) and an add (--no-gradient-accumulation-fusion).
void linear_backward_accumulate(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                                int64_t N, int64_t C, int64_t OC, bool fused, float* scratch, const char* who) {
  if (fused || dw == nullptr) {  // dw null: a frozen weight, only dinp (and db)
    kernels::linear_backward(dinp, dw, db, dout, inp, w, N, C, OC);
    return;
  }
  require(scratch != nullptr || OC * C == 0, who, "scratch is null with fused_grad_accumulation off");
  if (!profiler::shape_only())
    std::fill(scratch, scratch + OC * C, 0.0f);  // (OC, C): this micro-batch's weight gradient
  // (A dry run has no scratch: dw, a non-null token there, stands for it.)
  kernels::linear_backward(dinp, profiler::shape_only() ? dw : scratch, db, dout, inp, w, N, C, OC);
  accumulate(dw, scratch, OC * C);
}

}  // namespace

void sp_all_gather(Comm& tp, const float* shard, float* full, int64_t shard_elems, Wire wire) {
  tp.all_gather(shard, full, shard_elems, wire);
}

void sp_reduce_scatter(Comm& tp, const float* full, float* shard, int64_t shard_elems, Wire wire) {
  tp.reduce_scatter(full, shard, shard_elems, ReduceOp::kSum, wire);
}

void column_parallel_linear_forward(const TpConfig& tp, float* y, float* x_full, const float* x, const float* w,
                                    const float* b, int64_t N, int64_t C, int64_t OC_local) {
  constexpr const char* kWho = "column_parallel_linear_forward";
  if (sequence_parallel(tp)) {
    require(x_full != nullptr, kWho, "x_full is null under sequence parallelism");
    sp_all_gather(*tp.tp, x, x_full, shard_elems(tp, N, C, kWho), tp.wire);
    kernels::linear_forward(y, x_full, w, b, N, C, OC_local);
    return;
  }
  require(x_full == nullptr || x_full == x, kWho, "without sequence parallelism x_full must be x (or null)");
  kernels::linear_forward(y, x, w, b, N, C, OC_local);
}

void column_parallel_linear_backward(const TpConfig& tp, float* dx, float* dx_full, float* dw, float* db,
                                     const float* dy, const float* x_full, const float* w, int64_t N, int64_t C,
                                     int64_t OC_local, bool fused_grad_accumulation, float* scratch) {
  constexpr const char* kWho = "column_parallel_linear_backward";
  const bool sp = sequence_parallel(tp);
  require(!sp || dx_full != nullptr, kWho, "dx_full is null under sequence parallelism");
  float* dinp = sp ? dx_full : dx;  // (N, C): this rank's partial input gradient
  linear_backward_accumulate(dinp, dw, db, dy, x_full, w, N, C, OC_local, fused_grad_accumulation, scratch, kWho);
  if (sp)
    sp_reduce_scatter(*tp.tp, dx_full, dx, shard_elems(tp, N, C, kWho), tp.wire);
  else if (group_size(tp) > 1)
    tp.tp->all_reduce_sum(dx, N * C, tp.wire);
}

void row_parallel_linear_forward(const TpConfig& tp, float* y, float* y_full, const float* x, const float* w, int64_t N,
                                 int64_t IC_local, int64_t OC) {
  constexpr const char* kWho = "row_parallel_linear_forward";
  const bool sp = sequence_parallel(tp);
  require(!sp || y_full != nullptr, kWho, "y_full is null under sequence parallelism");
  float* partial = sp ? y_full : y;  // (N, OC): x · w^T of this rank's input columns
  kernels::linear_forward(partial, x, w, nullptr, N, IC_local, OC);
  if (sp)
    sp_reduce_scatter(*tp.tp, y_full, y, shard_elems(tp, N, OC, kWho), tp.wire);
  else if (group_size(tp) > 1)
    tp.tp->all_reduce_sum(y, N * OC, tp.wire);
}

void row_parallel_linear_backward(const TpConfig& tp, float* dx, float* dw, float* dy_full, const float* dy,
                                  const float* x, const float* w, int64_t N, int64_t IC_local, int64_t OC,
                                  bool fused_grad_accumulation, float* scratch) {
  constexpr const char* kWho = "row_parallel_linear_backward";
  const float* g = dy;  // (N, OC): the output gradient of every token
  if (sequence_parallel(tp)) {
    require(dy_full != nullptr, kWho, "dy_full is null under sequence parallelism");
    sp_all_gather(*tp.tp, dy, dy_full, shard_elems(tp, N, OC, kWho), tp.wire);
    g = dy_full;
  }
  linear_backward_accumulate(dx, dw, nullptr, g, x, w, N, IC_local, OC, fused_grad_accumulation, scratch, kWho);
}

}  // namespace mtrain::parallel
