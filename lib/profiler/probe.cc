#include "profiler/probe.h"

#include <utility>

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

Listener* set_listener(Listener* l, Kind deepest, bool tensors) {
  Listener* prev = detail::t_probe.listener;
  detail::t_probe.listener = l;
  detail::t_probe.deepest = deepest;
  detail::t_probe.tensors = tensors;
  return prev;
}

void rethrow_pending() {
  if (!detail::t_probe.pending) return;
  std::exception_ptr e = std::exchange(detail::t_probe.pending, nullptr);
  std::rethrow_exception(e);
}

}  // namespace mtrain::profiler
