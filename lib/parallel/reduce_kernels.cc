#include "parallel/reduce_kernels.h"

#include <cmath>
#include <cstring>
#include <type_traits>

namespace mtrain::parallel::detail {
namespace {

template <class T>
void fold(T* out, const void* const* inputs, int num_inputs, int64_t n, ReduceOp op) {
  std::memcpy(out, inputs[0], static_cast<size_t>(n) * sizeof(T));
  for (int k = 1; k < num_inputs; ++k) {
    const T* x = static_cast<const T*>(inputs[k]);
    switch (op) {
      case ReduceOp::kSum:
        if constexpr (std::is_floating_point_v<T>) {
          for (int64_t i = 0; i < n; ++i) out[i] = out[i] + x[i];
        } else {  // two's-complement wrap-around, as MPI_SUM does in practice (no signed-overflow UB)
          using U = std::make_unsigned_t<T>;
          for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(static_cast<U>(out[i]) + static_cast<U>(x[i]));
        }
        break;
      case ReduceOp::kMax:
        if constexpr (std::is_floating_point_v<T>) {
          for (int64_t i = 0; i < n; ++i) out[i] = (x[i] > out[i] || std::isnan(x[i])) ? x[i] : out[i];
        } else {
          for (int64_t i = 0; i < n; ++i) out[i] = x[i] > out[i] ? x[i] : out[i];
        }
        break;
      case ReduceOp::kMin:
        if constexpr (std::is_floating_point_v<T>) {
          for (int64_t i = 0; i < n; ++i) out[i] = (x[i] < out[i] || std::isnan(x[i])) ? x[i] : out[i];
        } else {
          for (int64_t i = 0; i < n; ++i) out[i] = x[i] < out[i] ? x[i] : out[i];
        }
        break;
    }
  }
}

}  // namespace

void reduce_in_rank_order(void* out, const void* const* inputs, int num_inputs, int64_t n, ScalarType t, ReduceOp op) {
  if (n == 0 || num_inputs == 0) return;
  switch (t) {
    case ScalarType::kF32:
      return fold(static_cast<float*>(out), inputs, num_inputs, n, op);
    case ScalarType::kF64:
      return fold(static_cast<double*>(out), inputs, num_inputs, n, op);
    case ScalarType::kI32:
      return fold(static_cast<int32_t*>(out), inputs, num_inputs, n, op);
    case ScalarType::kI64:
      return fold(static_cast<int64_t*>(out), inputs, num_inputs, n, op);
    case ScalarType::kU8:
      return fold(static_cast<uint8_t*>(out), inputs, num_inputs, n, op);
  }
}

ChunkLayout chunk_layout(int64_t n, int parts) {
  ChunkLayout c;
  c.counts.resize(parts);
  c.offsets.resize(parts);
  int64_t offset = 0;
  for (int k = 0; k < parts; ++k) {
    c.counts[k] = n / parts + (k < n % parts ? 1 : 0);
    c.offsets[k] = offset;
    offset += c.counts[k];
  }
  return c;
}

}  // namespace mtrain::parallel::detail
