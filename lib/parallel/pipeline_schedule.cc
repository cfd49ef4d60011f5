// The executing half of pipeline_schedule.h: runs a per-rank order
// (pipeline_order.cc) with the caller's callbacks and moves activations and
// gradients over the pipeline Comm: isend for every send, a blocking recv
// exactly when an action needs its input.
#include "parallel/pipeline_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <vector>

#include "common/errors.h"

namespace mtrain::parallel {
namespace {

enum Direction : int { kActivation = 0, kGradient = 1 };

class PipelineRunner {
 public:
  PipelineRunner(Comm& pp, const PipelineShape& shape, const PipelineCallbacks& cb, Wire wire, PipelineBuffers* buffers,
                 bool backward);
  void forward(const PipeAction& a);
  void backward(const PipeAction& a);
  void finish();  // waits until every send has been delivered

 private:
  int stages() const { return shape_.stages; }
  int stage() const { return shape_.stage; }
  bool first_virtual(int chunk) const { return chunk == 0 && stage() == 0; }
  bool last_virtual(int chunk) const { return chunk == shape_.chunks - 1 && stage() == stages() - 1; }
  int prev_stage() const { return (stage() + stages() - 1) % stages(); }
  int next_stage() const { return (stage() + 1) % stages(); }
  // Chunk of the previous / next virtual stage of (stage(), chunk).
  int prev_chunk(int chunk) const { return stage() == 0 ? chunk - 1 : chunk; }
  int next_chunk(int chunk) const { return stage() == stages() - 1 ? chunk + 1 : chunk; }
  // One stream per receiving chunk and direction (see pipeline_schedule.h).
  static int tag(Direction d, int into_chunk) { return 2 * into_chunk + d; }
  int64_t elems(int chunk, int microbatch) const;

  const float* receive(Direction d, int from, int into_chunk, int64_t n);
  float* receive_buffer(Direction d, int64_t n);
  void send(Direction d, int to, int into_chunk, const float* data, int64_t n, const PipeAction& a);

  Comm& pp_;
  const PipelineShape& shape_;
  const PipelineCallbacks& cb_;
  Wire wire_;
  bool moves_data_;
  std::vector<SendRequest> sends_;                      // in flight; completed ones are dropped
  PipelineBuffers* buffers_;                            // device receive buffers, or null:
  std::vector<float> host_activation_, host_gradient_;  // host ones, grown to the largest message
  std::vector<std::deque<std::vector<float>>> self_;    // (2 * chunks) messages to this rank (stages == 1)
  std::vector<float> local_;                            // the local message being consumed
};

PipelineRunner::PipelineRunner(Comm& pp, const PipelineShape& shape, const PipelineCallbacks& cb, Wire wire,
                               PipelineBuffers* buffers, bool backward)
    : pp_(pp), shape_(shape), cb_(cb), wire_(wire), moves_data_(pp.moves_data()), buffers_(buffers) {
  if (pp.size() != shape.stages || pp.rank() != shape.stage) {
    throw Error(ExitCode::kInternal,
                fmt::format("pipeline: comm '{}' is rank {} of {} but the shape says stage {} of {}", pp.name(),
                            pp.rank(), pp.size(), shape.stage, shape.stages));
  }
  if (!cb.message_elems || !cb.forward || (backward && !cb.backward)) {
    throw Error(ExitCode::kInternal, "pipeline: message_elems, forward and backward callbacks are required");
  }
  if (tag(kGradient, shape.chunks - 1) > Comm::kMaxTag) {
    throw Error(ExitCode::kInternal, fmt::format("pipeline: {} chunks exceed the tag range", shape.chunks));
  }
  if (shape.stages == 1) self_.resize(2 * shape.chunks);
}

int64_t PipelineRunner::elems(int chunk, int microbatch) const {
  const int64_t n = cb_.message_elems(chunk, microbatch);
  if (n < 0) {
    throw Error(ExitCode::kInternal,
                fmt::format("pipeline: message_elems({}, {}) = {} is negative", chunk, microbatch, n));
  }
  return n;
}

// Where a message of `n` elements from another stage lands. The device
// buffers are checked on a dry run too (their shape is all a meta tensor has).
float* PipelineRunner::receive_buffer(Direction d, int64_t n) {
  if (!buffers_) {
    std::vector<float>& v = d == kActivation ? host_activation_ : host_gradient_;
    if (static_cast<int64_t>(v.size()) < n) v.resize(n);
    return v.data();
  }
  Tensor& t = d == kActivation ? buffers_->activation() : buffers_->gradient();
  if (!t.defined() || t.numel() < n) {
    throw Error(ExitCode::kInternal,
                fmt::format("pipeline stage {}: a {}-element {} message does not fit its {}-element receive buffer",
                            stage(), n, d == kActivation ? "activation" : "gradient", t.defined() ? t.numel() : 0));
  }
  return t.data();
}

const float* PipelineRunner::receive(Direction d, int from, int into_chunk, int64_t n) {
  if (from == stage()) {  // one stage: the message was queued by this rank
    std::deque<std::vector<float>>& queue = self_[tag(d, into_chunk)];
    if (queue.empty()) throw Error(ExitCode::kInternal, "pipeline: a local message is missing (order bug)");
    local_.swap(queue.front());
    queue.pop_front();
    return moves_data_ ? local_.data() : nullptr;
  }
  float* buffer = receive_buffer(d, n);
  if (!moves_data_) {
    pp_.recv(static_cast<float*>(nullptr), n, from, tag(d, into_chunk), wire_);
    return nullptr;
  }
  pp_.recv(buffer, n, from, tag(d, into_chunk), wire_);
  return buffer;
}

void PipelineRunner::send(Direction d, int to, int into_chunk, const float* data, int64_t n, const PipeAction& a) {
  if (data == nullptr && n > 0 && moves_data_) {
    throw Error(ExitCode::kInternal,
                fmt::format("pipeline stage {}: the {} of chunk {}, microbatch {} returned no {} to send", stage(),
                            d == kActivation ? "forward" : "backward", a.chunk, a.microbatch,
                            d == kActivation ? "output" : "input gradient"));
  }
  if (to == stage()) {
    std::deque<std::vector<float>>& queue = self_[tag(d, into_chunk)];
    if (moves_data_) {
      queue.emplace_back(data, data + n);
    } else {
      queue.emplace_back();
    }
    return;
  }
  std::erase_if(sends_, [](SendRequest& r) { return r.done(); });
  sends_.push_back(pp_.isend(data, n, to, tag(d, into_chunk), wire_));
}

void PipelineRunner::forward(const PipeAction& a) {
  const int c = a.chunk;
  const float* input = nullptr;
  if (!first_virtual(c)) {
    input = receive(kActivation, prev_stage(), c, elems(prev_chunk(c), a.microbatch));
  }
  const float* output = cb_.forward(a, input);
  if (!last_virtual(c)) send(kActivation, next_stage(), next_chunk(c), output, elems(c, a.microbatch), a);
}

void PipelineRunner::backward(const PipeAction& a) {
  const int c = a.chunk;
  const float* grad_output = nullptr;
  if (!last_virtual(c)) grad_output = receive(kGradient, next_stage(), c, elems(c, a.microbatch));
  const float* grad_input = cb_.backward(a, grad_output);
  if (!first_virtual(c)) {
    send(kGradient, prev_stage(), prev_chunk(c), grad_input, elems(prev_chunk(c), a.microbatch), a);
  }
}

void PipelineRunner::finish() {
  for (SendRequest& r : sends_) r.wait();
  sends_.clear();
}

}  // namespace

PipelineBuffers::PipelineBuffers(device::Device& dev, const PipelineShape& shape, int64_t max_message_elems,
                                 DType dtype, bool meta) {
  if (shape.stages == 1) return;
  const bool one_chunk = shape.chunks == 1;
  const auto buffer = [&](const char* name) {
    return Tensor(dev, {max_message_elems}, dtype, device::MemCategory::kCommBuffers, name, meta);
  };
  if (!(one_chunk && shape.stage == 0)) activation_ = buffer("pipeline receive buffer (activations)");
  if (!(one_chunk && shape.stage == shape.stages - 1)) gradient_ = buffer("pipeline receive buffer (gradients)");
}

void run_pipeline(Comm& pp, const PipelineShape& shape, const PipelineCallbacks& cb, Wire wire,
                  PipelineBuffers* buffers) {
  const std::vector<PipeAction> actions = pipeline_actions(shape);
  PipelineRunner runner(pp, shape, cb, wire, buffers, /*backward=*/true);
  for (const PipeAction& a : actions) {
    if (a.op == PipeOp::kForward) {
      runner.forward(a);
    } else {
      runner.backward(a);
    }
  }
  runner.finish();
}

void run_pipeline_forward_only(Comm& pp, const PipelineShape& shape, const PipelineCallbacks& cb, Wire wire,
                               PipelineBuffers* buffers) {
  const std::vector<PipeAction> actions = pipeline_forward_only_actions(shape);
  PipelineRunner runner(pp, shape, cb, wire, buffers, /*backward=*/false);
  for (const PipeAction& a : actions) runner.forward(a);
  runner.finish();
}

}  // namespace mtrain::parallel
