// InferenceSession: token generation for `mtrain infer` with a KV cache.
// The prompt runs through the model once (prefill); every later step feeds
// only the newest token, whose keys and values join the cache
// (model/kv_cache.h), so a whole answer costs time linear in its length.
// With use_cache false each step recomputes the whole sequence (the
// reference the cache is tested and benchmarked against).
//
// Under model parallelism every rank of the model-parallel group calls
// generate() alike: the step runs through the pipeline (forward only), the
// last stage gathers the vocabulary shards of its TP group into one logits
// row, every TP rank of it selects the same token (same row, same draw), and
// the token is broadcast back to every stage.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "device/device.h"
#include "infer/sampling.h"
#include "model/gpt.h"
#include "model/kv_cache.h"
#include "parallel/parallel_state.h"
#include "train/forward_only.h"

namespace mtrain::infer {

struct GenerationConfig {
  int64_t max_new_tokens = 64;  // also bounded by the model's seq_length
  SamplingParams sampling;
  uint64_t seed = 42;  // the draws of sampling (unused when greedy)
  std::vector<int32_t> stop_ids;
  bool use_cache = true;
};

class InferenceSession {
 public:
  // `parallel` null: the model is whole on this rank.
  InferenceSession(model::GptModel& model, device::Device& dev, parallel::ParallelState* parallel = nullptr);

  // The new tokens (the same on every rank), ending after a stop id or at the
  // limits. on_token sees each token as it is chosen (on every rank);
  // on_logits sees each step's logits row over the real vocabulary before
  // sampling (on the ranks of the last pipeline stage only).
  std::vector<int32_t> generate(const std::vector<int32_t>& prompt, const GenerationConfig& g,
                                const std::function<void(int32_t)>& on_token = {},
                                const std::function<void(const std::vector<float>&)>& on_logits = {});

 private:
  // Runs tokens[0, n) (positions first, first+1, ...) through this rank's
  // chunks: with the cache (the cache then holds first+n tokens) or, without,
  // as the whole sequence from position 0 (first must be 0).
  void run_step(const int32_t* tokens, int64_t first, int64_t n, bool cached);
  // The logits row `row` of the last step over the real vocabulary (last stage only).
  std::vector<float> gather_logits(int64_t row);

  model::GptModel& model_;
  model::KvCache cache_;
  train::SequenceForward runner_;  // the pipeline this rank's chunks run in (train/forward_only.h)
  uint64_t draws_ = 0;             // sampling draws so far (a counter-based stream: same on every rank)
};

}  // namespace mtrain::infer
