#include "train/generate.h"

#include <algorithm>

#include "train/forward_only.h"

namespace mtrain::train {

namespace {

// The argmax over real vocabulary entries (never Megatron's padding) of one
// logits row holding this TP rank's slice; ties go to the lowest token id.
int32_t vocab_parallel_argmax(const float* row, const model::ModelConfig& c, parallel::Comm* tp) {
  const int64_t begin = c.vocab_start(), end = std::min(c.vocab, begin + c.vocab_local());
  double best[2] = {-1e300, -1};  // (logit, token id)
  for (int64_t v = begin; v < end; ++v) {
    if (row[v - begin] > best[0]) best[0] = row[v - begin], best[1] = static_cast<double>(v);
  }
  if (!tp || tp->size() == 1) return static_cast<int32_t>(best[1]);
  std::vector<double> all(2 * tp->size());
  tp->all_gather(best, all.data(), 2);
  int winner = 0;
  for (int r = 1; r < tp->size(); ++r)
    if (all[2 * r + 1] >= 0 && all[2 * r] > all[2 * winner]) winner = r;
  return static_cast<int32_t>(all[2 * winner + 1]);
}

}  // namespace

std::vector<int32_t> greedy_generate(model::GptModel& model, const std::vector<int32_t>& prompt, int64_t max_new_tokens,
                                     const std::vector<int32_t>& stop_ids, parallel::ParallelState* parallel) {
  const model::ModelConfig& c = model.config();
  const int64_t pad_multiple = c.sequence_parallel ? c.tp : 1;
  std::vector<int32_t> seq = prompt, out, tokens;
  // One row of at most seq_length tokens per forward.
  SequenceForward runner(model, parallel, /*stage_buffers=*/true);
  while (static_cast<int64_t>(out.size()) < max_new_tokens && static_cast<int64_t>(seq.size()) < c.seq_length) {
    const int64_t T = static_cast<int64_t>(seq.size());
    // Rows padded after the last real token (sequence parallelism splits the
    // tokens over TP); causal attention keeps row T-1 exact.
    const int64_t Tp = std::min(c.seq_length, (T + pad_multiple - 1) / pad_multiple * pad_multiple);
    tokens.assign(Tp, 0);
    std::copy(seq.begin(), seq.end(), tokens.begin());
    int32_t next = -1;
    runner.run(tokens.data(), 0, Tp, [&](int chunk, const model::TokenBatch& b, const float* input) {
      const float* h = model.forward_chunk(chunk, 0, b, input, 0, /*training=*/false);
      if (model.chunk(chunk).post)
        next = vocab_parallel_argmax(model.logits() + (T - 1) * c.vocab_local(), c, &model.tp_comm());
      return h;
    });
    next = runner.share_token(next);
    out.push_back(next);
    seq.push_back(next);
    if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) break;
  }
  return out;
}

}  // namespace mtrain::train
