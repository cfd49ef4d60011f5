// Pipeline-parallel schedules (Megatron's forward_backward_pipelining_*):
// the per-rank compute order of 1F1B and of the interleaved (virtual
// pipeline) 1F1B schedule, and the runner that executes such an order with
// callbacks, moving activations and their gradients between neighbouring
// stages over the pipeline Comm. The schedule never sees the model: the
// caller's forward/backward callbacks own the activations (one set per slot).
//
// Layout: `stages` pipeline ranks (pp group rank = stage), `chunks` model
// chunks per rank. Virtual stage of chunk c on stage s is c * stages + s: the
// forward output of (s, c) goes to (s + 1, c), or to (0, c + 1) when s is the
// last stage; gradients flow the other way. The first virtual stage is
// (0, 0), the last (stages - 1, chunks - 1).
//
// Transport (pipeline_schedule.cc): every send is Comm::isend (the payload is
// copied, so a callback's output pointer may die right after the call);
// receives are blocking recvs issued exactly when an action needs its input.
// Messages are tagged by receiving chunk and direction (2c: activations into
// chunk c, 2c + 1: gradients into chunk c), and each chunk handles its
// microbatches in increasing order on every stage, so the k-th message of a
// (pair, tag) stream is microbatch k on both sides. With sends that never
// block, any causally valid per-rank order completes; Megatron's orders are.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "parallel/comm.h"
#include "tensor/tensor.h"

namespace mtrain::parallel {

// One rank's view of a pipeline. `microbatches` per global batch on this DP rank.
struct PipelineShape {
  int stages = 1;
  int stage = 0;
  int chunks = 1;  // virtual pipeline size; 1 = plain 1F1B
  int microbatches = 1;
  // The activation pool of each chunk (size chunks; empty: chunk c is pool
  // c). Chunks whose activations have one shape share a pool, as a caching
  // allocator reuses one chunk's freed activations for another's: the slots
  // of a pool are the most of its chunks' micro-batches in flight at once.
  std::vector<int> chunk_pool{};
  int pool_of(int chunk) const { return chunk_pool.empty() ? chunk : chunk_pool[chunk]; }
  int pools() const;
};

enum class PipeOp : uint8_t { kForward, kBackward };

struct PipeAction {
  PipeOp op = PipeOp::kForward;
  int chunk = 0;
  int microbatch = 0;
  // Activation slot of (chunk, microbatch): the lowest slot of that chunk's
  // pool free when its forward runs; its backward carries the same slot.
  int slot = 0;
  bool operator==(const PipeAction&) const = default;
};

// The compute order on this rank, exactly Megatron's:
// - stages > 1, chunks == 1: 1F1B. warmup = min(stages - stage - 1, M)
//   forwards, then one forward + one backward while forwards remain, then the
//   remaining backwards.
// - stages > 1, chunks > 1: interleaved 1F1B. Forward k runs chunk
//   (k mod (stages * chunks)) / stages on microbatch
//   (k / (stages * chunks)) * stages + k mod stages; backward k the same with
//   chunk chunks - 1 - that. warmup = (stages - stage - 1) * 2 +
//   (chunks - 1) * stages, capped at M * chunks (then all forwards first).
//   Needs M % stages == 0 (ConfigError with Megatron's wording otherwise).
// - stages == 1: no pipelining: F0 B0 F1 B1 ...; with chunks > 1 (mtrain's
//   extension, Megatron has none) microbatch m runs the forwards of chunks
//   0..C-1, then their backwards C-1..0, every slot 0.
// Error(kInternal) for a malformed shape (sizes < 1, stage out of range).
std::vector<PipeAction> pipeline_actions(const PipelineShape& shape);

// Evaluation order: forwards only, Megatron's forward order (chunks == 1 or
// stages == 1: microbatch by microbatch, each through chunks 0..C-1 in turn
// when stages == 1; interleaved: groups of `stages` microbatches per chunk).
// Every slot is 0: nothing is kept for a backward.
std::vector<PipeAction> pipeline_forward_only_actions(const PipelineShape& shape);

// Activation slots each pool needs on this rank (size shape.pools()): the
// most (chunk, microbatch) pairs of its chunks whose forward has run and
// whose backward has not, at any point of pipeline_actions(shape). 1F1B:
// min(stages - stage, M); interleaved with every chunk in one pool, stage 0:
// Megatron's (stages - 1) * 2 + (chunks - 1) * stages + 1 (warm-up + 1).
std::vector<int> pipeline_activation_slots(const PipelineShape& shape);

struct PipelineCallbacks {
  // Elements of the activation (chunk, microbatch) sends on, which is also
  // what it receives (the gradient has the same size). Every stage must get
  // the same answer: a message between virtual stages is sized by the chunk
  // that produced the activation (the input of (0, c) by chunk c - 1).
  std::function<int64_t(int chunk, int microbatch)> message_elems;
  // Runs the forward of a.chunk for a.microbatch. input: the activation from
  // the previous virtual stage (nullptr on the first virtual stage), valid only
  // during the call (the receive buffer is reused: copy what the backward
  // needs). Returns the output to send on (nullptr on the last virtual stage,
  // where the loss stays in the model); it is copied before the next callback.
  std::function<const float*(const PipeAction& a, const float* input)> forward;
  // Runs the backward of a.chunk for a.microbatch. grad_output: d(output) from
  // the next virtual stage (nullptr on the last virtual stage), valid only
  // during the call. Returns d(input) to send back (ignored on the first
  // virtual stage; return nullptr there), copied before the next callback.
  std::function<const float*(const PipeAction& a, const float* grad_output)> backward;
};

// The receive buffers of one pipeline rank on its device: one for the
// activations arriving from the previous stage, one for the gradients
// arriving from the next, each sized for the largest message and only where
// this rank receives that kind (1F1B: the first stage gets no activations,
// the last no gradients). Allocated once, like the model's activation slots,
// so a real run's peak and a dry run's (meta tensors) are the same bytes.
// Category: communication buffers. Megatron's p2p recv tensor becomes the
// stage's input tensor that autograd keeps for the backward, which its
// activation formula already counts as the first layer's input; mtrain's
// model copies the received input into its own activation slot (counted as
// activations), so what remains is a staging buffer of the transfer.
class PipelineBuffers {
 public:
  PipelineBuffers() = default;  // none (one stage)
  // `max_message_elems`: the largest message (message_elems) of any action;
  // `dtype`: the wire dtype the messages travel at (the model's).
  PipelineBuffers(device::Device& dev, const PipelineShape& shape, int64_t max_message_elems, DType dtype, bool meta);
  Tensor& activation() { return activation_; }
  Tensor& gradient() { return gradient_; }

 private:
  Tensor activation_, gradient_;
};

// Runs pipeline_actions(shape) on this rank; pp.rank() must be shape.stage and
// pp.size() shape.stages. Every transfer goes through `pp` (so the observer
// sees it) with `wire` (the device dtype of the messages). Returns once every
// send has completed (SendRequest::wait). Never relies on MPI's eager
// buffering and completes under SimComm's synchronous sends. Messages from
// another stage arrive in `buffers` (Error(kInternal) when one does not fit);
// null: in host buffers the runner grows (schedule tests without a device).
// On a Comm that moves no data (MetaComm, dry runs) input / grad_output are
// nullptr. With one stage, a chunk's message to the next chunk stays in a
// host queue: no transfer happens (mtrain's extension, Megatron has none).
void run_pipeline(Comm& pp, const PipelineShape& shape, const PipelineCallbacks& cb, Wire wire = {},
                  PipelineBuffers* buffers = nullptr);

// Evaluation: pipeline_forward_only_actions(shape), forwards only, no
// backward callback, nothing kept for a backward.
void run_pipeline_forward_only(Comm& pp, const PipelineShape& shape, const PipelineCallbacks& cb, Wire wire = {},
                               PipelineBuffers* buffers = nullptr);

}  // namespace mtrain::parallel
