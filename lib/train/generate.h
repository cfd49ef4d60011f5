// Greedy decoding with the training model (no KV cache: each new token runs
// a forward over the whole prefix, which is plenty for a demo's short answers).
// Under model parallelism every rank of the model-parallel group takes part:
// the prefix runs through the pipeline (forward only), the last stage picks
// the argmax over the vocabulary shards of its TP group, and the token is
// broadcast back to every stage.
#pragma once

#include <cstdint>
#include <vector>

#include "model/gpt.h"
#include "parallel/parallel_state.h"

namespace mtrain::train {

// Appends up to max_new_tokens argmax tokens to `prompt`, stopping after any of
// `stop_ids`; never beyond the model's sequence length. Returns the new tokens
// (the same on every rank). `parallel` null: the model is whole on this rank.
std::vector<int32_t> greedy_generate(model::GptModel& model, const std::vector<int32_t>& prompt, int64_t max_new_tokens,
                                     const std::vector<int32_t>& stop_ids, parallel::ParallelState* parallel = nullptr);

}  // namespace mtrain::train
