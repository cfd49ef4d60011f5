#include "lora/lora_linear.h"

#include "common/errors.h"
#include "profiler/kernel_region.h"

namespace mtrain::lora {

namespace {

int group_size(const parallel::TpConfig& tp) { return tp.tp == nullptr ? 1 : tp.tp->size(); }
int group_rank(const parallel::TpConfig& tp) { return tp.tp == nullptr ? 0 : tp.tp->rank(); }
bool sequence_parallel(const parallel::TpConfig& tp) { return tp.sequence_parallel && group_size(tp) > 1; }

// The tokens [row0, row0 + rows) this rank's reduced activations hold.
struct TokenShard {
  int64_t row0 = 0, rows = 0;
};
TokenShard token_shard(const parallel::TpConfig& tp, int64_t N) {
  if (!sequence_parallel(tp)) return {0, N};
  const int p = group_size(tp);
  if (N % p != 0) throw Error(ExitCode::kInternal, "LoRA adapter: sequence parallelism needs N divisible by TP");
  return {group_rank(tp) * (N / p), N / p};
}

// The dropout site of rows [row0, ...) and input columns [col0, ...) of row_stride.
DropoutSite site(const AdapterWeights& a, int64_t row0, int64_t row_stride, int64_t col0) {
  DropoutSite d{a.dropout, a.seed, row_stride, col0, a.tokens};
  d.tokens.row0 = row0;
  return d;
}

void all_reduce(const parallel::TpConfig& tp, float* data, int64_t n) {
  if (group_size(tp) > 1) tp.tp->all_reduce_sum(data, n, tp.wire);
}

}  // namespace

void column_adapter_forward(const parallel::TpConfig& /*tp: no communication*/, float* y, const AdapterBuffers& buf,
                            const float* x_full, const AdapterWeights& a, int64_t N, int64_t C, int64_t OC_local) {
  const DropoutSite d = site(a, 0, C, 0);
  lora_down_forward(buf.h, buf.scratch, x_full, a.A, N, C, a.rank, d);
  lora_up_forward(y, buf.h, a.B, a.scale, N, a.rank, OC_local);
}

void column_adapter_backward(const parallel::TpConfig& tp, float* dx, const AdapterBuffers& buf, const float* dy,
                             const float* x_full, const AdapterWeights& a, int64_t N, int64_t C, int64_t OC_local) {
  lora_up_backward(buf.dh, a.dB, dy, buf.h, a.B, a.scale, N, a.rank, OC_local);
  all_reduce(tp, buf.dh, N * a.rank);  // sum over the output rows of every rank
  const DropoutSite d = site(a, 0, C, 0);
  const TokenShard s = token_shard(tp, N);
  if (s.rows == N) {
    lora_down_backward(dx, a.dA, buf.dh, x_full, a.A, buf.scratch, N, C, a.rank, d);
    return;
  }
  // Sequence parallel: dA from every token, d(x) for this rank's tokens.
  lora_down_backward(nullptr, a.dA, buf.dh, x_full, a.A, buf.scratch, N, C, a.rank, d);
  const DropoutSite ds = site(a, s.row0, C, 0);
  lora_down_backward(dx, nullptr, buf.dh + s.row0 * a.rank, x_full + s.row0 * C, a.A, buf.scratch, s.rows, C, a.rank,
                     ds);
}

void row_adapter_forward(const parallel::TpConfig& tp, float* y, const AdapterBuffers& buf, const float* x,
                         const AdapterWeights& a, int64_t N, int64_t IC_local, int64_t OC) {
  const DropoutSite d = site(a, 0, IC_local * group_size(tp), group_rank(tp) * IC_local);
  lora_down_forward(buf.h, buf.scratch, x, a.A, N, IC_local, a.rank, d);
  all_reduce(tp, buf.h, N * a.rank);  // sum over the input columns of every rank
  const TokenShard s = token_shard(tp, N);
  lora_up_forward(y, buf.h + s.row0 * a.rank, a.B, a.scale, s.rows, a.rank, OC);
}

void row_adapter_backward(const parallel::TpConfig& tp, float* dx, const AdapterBuffers& buf, const float* dy_full,
                          const float* x, const AdapterWeights& a, int64_t N, int64_t IC_local, int64_t OC) {
  lora_up_backward(buf.dh, a.dB, dy_full, buf.h, a.B, a.scale, N, a.rank, OC);
  const DropoutSite d = site(a, 0, IC_local * group_size(tp), group_rank(tp) * IC_local);
  lora_down_backward(dx, a.dA, buf.dh, x, a.A, buf.scratch, N, IC_local, a.rank, d);
}

}  // namespace mtrain::lora
