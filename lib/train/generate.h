// Greedy decoding with the training model (no KV cache: each new token runs
// a forward over the whole prefix, which is plenty for a demo's short answers).
#pragma once

#include <cstdint>
#include <vector>

#include "model/gpt.h"

namespace mtrain::train {

// Appends up to max_new_tokens argmax tokens to `prompt`, stopping after any of
// `stop_ids`; never beyond the model's sequence length. Returns the new tokens.
std::vector<int32_t> greedy_generate(model::GptModel& model, const std::vector<int32_t>& prompt, int64_t max_new_tokens,
                                     const std::vector<int32_t>& stop_ids);

}  // namespace mtrain::train
