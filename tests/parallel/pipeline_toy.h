// A toy model for the pipeline schedule tests (test_pipeline_schedule.cc
// under SimWorld, test_mpi_comm.cc under mpirun). Virtual stage k computes
// y = a_k * x + b_k elementwise; microbatch m is a vector of width(m) floats
// (widths differ, so message sizes vary); the loss of a microbatch is
// sum(w . y) on the last virtual stage. The backward accumulates da_k, db_k
// and passes dx = dy * a_k. ToyStage is one pipeline rank (its chunks, their
// activation slots, checks of the schedule's promises); toy_reference runs
// the same arithmetic sequentially, so every gradient must match bit for bit.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "parallel/pipeline_schedule.h"

namespace mtrain::parallel::testing {

constexpr int kToyMaxWidth = 5;
inline int toy_width(int microbatch) { return 3 + microbatch % 3; }
inline float toy_a(int k, int i) { return 0.5f + 0.125f * static_cast<float>(k) - 0.03f * static_cast<float>(i); }
inline float toy_b(int k, int i) { return 0.01f * static_cast<float>((k + 1) * (i + 1)) - 0.02f; }
inline float toy_w(int i) { return 1.0f - 0.3f * static_cast<float>(i); }
inline float toy_x0(int m, int i) { return 0.7f + 0.3f * static_cast<float>(m) - 0.1f * static_cast<float>(i); }

// The arithmetic, shared by the pipeline and the reference (not inlined, so
// both run the same instructions).
[[gnu::noinline]] inline void toy_forward(int k, const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] = toy_a(k, i) * x[i] + toy_b(k, i);
}
[[gnu::noinline]] inline float toy_loss(const float* y, int n) {
  float loss = 0;
  for (int i = 0; i < n; ++i) loss += toy_w(i) * y[i];
  return loss;
}
// da, db (kToyMaxWidth) accumulate; dx may alias dy.
[[gnu::noinline]] inline void toy_backward(int k, const float* x, const float* dy, float* da, float* db, float* dx,
                                           int n) {
  for (int i = 0; i < n; ++i) {
    da[i] += dy[i] * x[i];
    db[i] += dy[i];
    dx[i] = dy[i] * toy_a(k, i);
  }
}

struct ToyResult {
  std::vector<float> loss;                 // (microbatches) NaN where not computed here
  std::vector<std::vector<float>> da, db;  // (virtual stages, kToyMaxWidth), zero where not owned here
};

inline ToyResult toy_reference(int stages, int chunks, int microbatches) {
  const int virtual_stages = stages * chunks;
  ToyResult r{std::vector<float>(microbatches), std::vector<std::vector<float>>(virtual_stages),
              std::vector<std::vector<float>>(virtual_stages)};
  for (int k = 0; k < virtual_stages; ++k) {
    r.da[k].assign(kToyMaxWidth, 0.0f);
    r.db[k].assign(kToyMaxWidth, 0.0f);
  }
  for (int m = 0; m < microbatches; ++m) {
    const int n = toy_width(m);
    std::vector<std::vector<float>> x(virtual_stages + 1, std::vector<float>(n));  // (virtual stages + 1, n)
    for (int i = 0; i < n; ++i) x[0][i] = toy_x0(m, i);
    for (int k = 0; k < virtual_stages; ++k) toy_forward(k, x[k].data(), x[k + 1].data(), n);
    r.loss[m] = toy_loss(x[virtual_stages].data(), n);
    std::vector<float> dy(n);
    for (int i = 0; i < n; ++i) dy[i] = toy_w(i);
    for (int k = virtual_stages - 1; k >= 0; --k) {
      toy_backward(k, x[k].data(), dy.data(), r.da[k].data(), r.db[k].data(), dy.data(), n);
    }
  }
  return r;
}

// One pipeline rank of the toy model. `violations` counts broken promises of
// the schedule: a slot reused while busy, a backward whose slot holds another
// microbatch, an input that is null when it must not be (or the reverse).
class ToyStage {
 public:
  ToyStage(const PipelineShape& shape, bool training) : shape_(shape), training_(training) {
    const int virtual_stages = shape.stages * shape.chunks;
    result.loss.assign(shape.microbatches, std::numeric_limits<float>::quiet_NaN());
    result.da.assign(virtual_stages, std::vector<float>(kToyMaxWidth, 0.0f));
    result.db = result.da;
    const std::vector<int> slots = training ? pipeline_activation_slots(shape) : std::vector<int>(shape.chunks, 1);
    for (int c = 0; c < shape.chunks; ++c) slots_.emplace_back(slots[c]);
  }

  PipelineCallbacks callbacks() {
    return PipelineCallbacks{
        .message_elems = [](int, int m) { return int64_t{toy_width(m)}; },
        .forward = [this](const PipeAction& a, const float* input) { return forward(a, input); },
        .backward = [this](const PipeAction& a, const float* grad) { return backward(a, grad); },
    };
  }

  ToyResult result;
  int violations = 0;
  int forwards = 0, backwards = 0;

 private:
  struct Slot {
    bool busy = false;
    int microbatch = -1;
    float x[kToyMaxWidth] = {};  // the forward's input, kept for the backward
  };
  int virtual_stage(int chunk) const { return chunk * shape_.stages + shape_.stage; }
  bool last(int chunk) const { return virtual_stage(chunk) == shape_.stages * shape_.chunks - 1; }

  const float* forward(const PipeAction& a, const float* input) {
    ++forwards;
    const int k = virtual_stage(a.chunk), n = toy_width(a.microbatch);
    Slot& slot = slots_.at(a.chunk).at(a.slot);
    violations += slot.busy || ((k == 0) != (input == nullptr));
    for (int i = 0; i < n; ++i) slot.x[i] = input ? input[i] : toy_x0(a.microbatch, i);
    slot.busy = training_;  // forward-only runs release the slot at once
    slot.microbatch = a.microbatch;
    toy_forward(k, slot.x, out_, n);
    if (!last(a.chunk)) return out_;
    result.loss[a.microbatch] = toy_loss(out_, n);
    return nullptr;
  }

  const float* backward(const PipeAction& a, const float* grad_output) {
    ++backwards;
    const int k = virtual_stage(a.chunk), n = toy_width(a.microbatch);
    Slot& slot = slots_.at(a.chunk).at(a.slot);
    violations += !slot.busy || slot.microbatch != a.microbatch || (last(a.chunk) != (grad_output == nullptr));
    slot.busy = false;
    float dy[kToyMaxWidth];
    for (int i = 0; i < n; ++i) dy[i] = grad_output ? grad_output[i] : toy_w(i);
    toy_backward(k, slot.x, dy, result.da[k].data(), result.db[k].data(), out_, n);
    return k == 0 ? nullptr : out_;
  }

  PipelineShape shape_;
  bool training_;
  std::vector<std::vector<Slot>> slots_;  // (chunks, activation slots)
  float out_[kToyMaxWidth] = {};          // the output / input gradient handed to the runner
};

}  // namespace mtrain::parallel::testing
