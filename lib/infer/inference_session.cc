#include "infer/inference_session.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/errors.h"
#include "common/rng.h"

namespace mtrain::infer {

InferenceSession::InferenceSession(model::GptModel& model, device::Device& dev, parallel::ParallelState* parallel)
    : model_(model), cache_(model, dev), runner_(model, parallel, /*stage_buffers=*/false) {}

void InferenceSession::run_step(const int32_t* tokens, int64_t first, int64_t n, bool cached) {
  runner_.run(tokens, first, n, [&](int chunk, const model::TokenBatch& b, const float* input) {
    return cached ? model_.decode_chunk(chunk, cache_, b, input)
                  : model_.forward_chunk(chunk, 0, b, input, /*seed=*/0, /*training=*/false);
  });
  if (cached) cache_.advance(n);
}

std::vector<float> InferenceSession::gather_logits(int64_t row) {
  const model::ModelConfig& c = model_.config();
  const int64_t V = c.vocab_local();
  const float* mine = model_.logits() + row * V;
  std::vector<float> full(static_cast<size_t>(V * c.tp));
  if (c.tp == 1) {
    std::copy(mine, mine + V, full.begin());
  } else {
    model_.tp_comm().all_gather(mine, full.data(), V);  // rank r holds ids [r*V, (r+1)*V)
  }
  full.resize(static_cast<size_t>(c.vocab));  // Megatron's padded ids are never candidates
  return full;
}

std::vector<int32_t> InferenceSession::generate(const std::vector<int32_t>& prompt, const GenerationConfig& g,
                                                const std::function<void(int32_t)>& on_token,
                                                const std::function<void(const std::vector<float>&)>& on_logits) {
  const int64_t capacity = model_.config().seq_length;
  if (prompt.empty()) throw Error(ExitCode::kInternal, "generate: empty prompt");
  if (static_cast<int64_t>(prompt.size()) > capacity)
    throw DataError(
        fmt::format("the prompt has {} tokens, more than the model's seq_length {}", prompt.size(), capacity),
        "shorten the conversation (`clear` forgets the history) or use a model with a longer context");
  const bool last_stage = model_.chunk(model_.num_chunks() - 1).post;
  std::vector<int32_t> seq = prompt, out;
  cache_.clear();
  int64_t fed = 0;  // tokens of seq already in the cache
  while (static_cast<int64_t>(out.size()) < g.max_new_tokens && static_cast<int64_t>(seq.size()) < capacity) {
    const int64_t T = static_cast<int64_t>(seq.size());
    if (g.use_cache) {
      run_step(seq.data() + fed, fed, T - fed, true);
    } else {
      run_step(seq.data(), 0, T, false);
    }
    const int64_t row = g.use_cache ? T - fed - 1 : T - 1;
    fed = T;
    int32_t next = -1;
    if (last_stage) {
      std::vector<float> logits = gather_logits(row);
      if (on_logits) on_logits(logits);
      // 53-bit uniform draw in [0, 1) of this step.
      const double u = static_cast<double>(mix64(stream_seed(g.seed, draws_)) >> 11) * 0x1p-53;
      next = select_token(logits.data(), static_cast<int64_t>(logits.size()), seq, g.sampling, u);
    }
    if (!g.sampling.greedy()) ++draws_;
    next = runner_.share_token(next);
    out.push_back(next);
    seq.push_back(next);
    if (on_token) on_token(next);
    if (std::find(g.stop_ids.begin(), g.stop_ids.end(), next) != g.stop_ids.end()) break;
  }
  return out;
}

}  // namespace mtrain::infer
