#include "observe/hooks.h"

#include <algorithm>

namespace mtrain::observe {

void HookList::step_begin(int64_t it) {
  profiler::discard_pending();
  int deepest = -1;
  bool tensors = false;
  for (size_t i = 0; i < hooks_.size(); ++i) {
    const std::optional<profiler::Kind> k = hooks_[i]->region_depth(it);
    depth_[i] = k ? static_cast<int>(*k) : -1;
    deepest = std::max(deepest, depth_[i]);
    if (k) tensors = tensors || hooks_[i]->region_tensors(it);
  }
  if (deepest >= 0) {
    profiler::set_listener(this, static_cast<profiler::Kind>(deepest), tensors);
    listening_ = true;
  } else {
    stop_listening();
  }
  for (auto& h : hooks_) h->on_step_begin(it);
}

void HookList::train_end(const TrainInfo& i) {
  stop_listening();
  for (auto& h : hooks_) h->on_train_end(i);
}

void HookList::begin(const profiler::Region& r, std::span<const profiler::TensorRef> t) {
  for (size_t i = 0; i < hooks_.size(); ++i)
    if (static_cast<int>(r.kind) <= depth_[i]) hooks_[i]->on_region_begin(r, t);
}

void HookList::end(const profiler::Region& r, std::span<const profiler::TensorRef> t) {
  for (size_t i = 0; i < hooks_.size(); ++i)
    if (static_cast<int>(r.kind) <= depth_[i]) hooks_[i]->on_region_end(r, t);
}

void HookList::stop_listening() {
  if (!listening_) return;
  profiler::set_listener(nullptr, profiler::Kind::kIteration, false);
  listening_ = false;
}

}  // namespace mtrain::observe
