// One sequence through this rank's part of the model, forward only: what
// generation runs for every new token, both greedy_generate (train/generate.h,
// the answers after training) and InferenceSession (`mtrain infer`). On one
// pipeline stage the chunks run in order; under pipeline parallelism the
// forward-only schedule runs with one micro-batch, the activations passing
// between stages. Every rank of the model-parallel group calls it alike.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "model/gpt.h"
#include "parallel/parallel_state.h"
#include "parallel/pipeline_schedule.h"

namespace mtrain::train {

// Runs chunk `chunk` of this rank on the sequence `b` and `input` (the
// previous chunk's or stage's output; null on the first) and returns its
// output: a full forward, or a KV-cache decode step.
using ChunkForward = std::function<const float*(int chunk, const model::TokenBatch& b, const float* input)>;

class SequenceForward {
 public:
  // parallel null: the model is whole on this rank. stage_buffers: under PP,
  // stage the messages in buffers on the model's device sized for a whole
  // seq_length sequence (false: the schedule's own).
  SequenceForward(model::GptModel& model, parallel::ParallelState* parallel, bool stage_buffers);

  // Runs tokens[0, n), at positions first, first+1, ..., as one row (B = 1).
  void run(const int32_t* tokens, int64_t first, int64_t n, const ChunkForward& forward);
  // The token the last pipeline stage chose, on every stage (broadcast under PP).
  int32_t share_token(int32_t token);

 private:
  bool pipelined() const { return parallel_ && parallel_->grid().pp() > 1; }
  // This rank's place in the pipeline, one micro-batch (under PP only).
  parallel::PipelineShape pipeline_shape() const {
    return {parallel_->grid().pp(), parallel_->coords().pp, model_.num_chunks(), 1};
  }

  model::GptModel& model_;
  parallel::ParallelState* parallel_;
  parallel::PipelineBuffers buffers_;
  bool stage_buffers_;
  std::vector<int32_t> positions_;
};

}  // namespace mtrain::train
