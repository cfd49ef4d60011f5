#include "profiler/probe.h"

namespace mtrain::profiler {

namespace detail {
thread_local ThreadProbe t_probe;
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kIteration:
      return "iteration";
    case Kind::kPhase:
      return "phase";
    case Kind::kModule:
      return "module";
    case Kind::kOp:
      return "op";
    case Kind::kKernel:
      return "kernel";
  }
  return "?";
}

const char* pass_name(Pass p) {
  switch (p) {
    case Pass::kNone:
      return "";
    case Pass::kForward:
      return "forward";
    case Pass::kBackward:
      return "backward";
  }
  return "?";
}

TensorRef tensor_2d(const char* role, const float* data, int64_t rows, int64_t cols, const char* dtype, Partition p) {
  TensorRef t;
  t.role = role;
  t.data = data;
  t.numel = rows * cols;
  t.dims = {rows, cols, 0, 0};
  t.ndim = 2;
  t.dtype = dtype;
  t.partition = p;
  return t;
}

TensorRef tensor_4d(const char* role, const float* data, int64_t a, int64_t b, int64_t c, int64_t d, const char* dtype,
                    Partition p) {
  TensorRef t;
  t.role = role;
  t.data = data;
  t.numel = a * b * c * d;
  t.dims = {a, b, c, d};
  t.ndim = 4;
  t.dtype = dtype;
  t.partition = p;
  return t;
}

Listener* set_listener(Listener* l, Kind deepest, bool tensors) {
  Listener* prev = detail::t_probe.listener;
  detail::t_probe = {l, deepest, tensors};
  return prev;
}

}  // namespace mtrain::profiler
