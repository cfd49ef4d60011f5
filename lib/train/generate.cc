#include "train/generate.h"

#include <algorithm>

namespace mtrain::train {

std::vector<int32_t> greedy_generate(model::GptModel& model, const std::vector<int32_t>& prompt, int64_t max_new_tokens,
                                     const std::vector<int32_t>& stop_ids) {
  const model::ModelConfig& c = model.config();
  std::vector<int32_t> seq = prompt;
  std::vector<int32_t> out;
  std::vector<int32_t> positions;
  while (static_cast<int64_t>(out.size()) < max_new_tokens && static_cast<int64_t>(seq.size()) < c.seq_length) {
    const int64_t T = static_cast<int64_t>(seq.size());
    positions.resize(T);
    for (int64_t t = 0; t < T; ++t) positions[t] = static_cast<int32_t>(t);
    model::TokenBatch b;
    b.B = 1;
    b.T = T;
    b.tokens = seq.data();
    b.positions = positions.data();
    model.forward(b, 0, /*training=*/false);
    // Only real vocabulary entries are candidates, never Megatron's padding.
    const float* row = model.logits() + (T - 1) * c.padded_vocab;
    const int32_t next = static_cast<int32_t>(std::max_element(row, row + c.vocab) - row);
    out.push_back(next);
    seq.push_back(next);
    if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) break;
  }
  return out;
}

}  // namespace mtrain::train
