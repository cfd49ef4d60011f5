// Next-token selection for `mtrain infer`, with the semantics of Hugging Face
// transformers' generate(): the logits processors run in its order —
// repetition penalty, then (sampling only) temperature, top-k, top-p — and a
// token is drawn from the softmax of what is left. Temperature 0 is greedy
// decoding (swift: do_sample false): repetition penalty, then the argmax.
//
// The row holds the real vocabulary only (Megatron's padded ids are never
// candidates); the caller gathers it across tensor-parallel ranks first.
#pragma once

#include <cstdint>
#include <vector>

namespace mtrain::infer {

struct SamplingParams {
  double temperature = 0.0;         // 0: greedy
  int top_k = 50;                   // 0: off (HF's TopKLogitsWarper only when top_k > 0)
  double top_p = 1.0;               // 1: off
  double repetition_penalty = 1.0;  // 1: off
  bool greedy() const { return temperature <= 0.0; }
};

// HF RepetitionPenaltyLogitsProcessor: every id in `context` (prompt and the
// tokens generated so far) has its logit divided by `penalty` when positive,
// multiplied when negative.
void apply_repetition_penalty(float* logits, int64_t vocab, const std::vector<int32_t>& context, double penalty);
// TemperatureLogitsWarper: logits / temperature.
void apply_temperature(float* logits, int64_t vocab, double temperature);
// TopKLogitsWarper: logits below the k-th largest become -inf (ties kept).
void apply_top_k(float* logits, int64_t vocab, int top_k);
// TopPLogitsWarper: in ascending order of logit, the tokens whose cumulative
// probability is <= 1 - top_p become -inf; the most likely token always stays.
void apply_top_p(float* logits, int64_t vocab, double top_p);

// The chosen token for one logits row (modified in place). `u` in [0, 1) is
// the uniform draw of this step (unused when greedy): the first id whose
// cumulative probability exceeds it.
int32_t select_token(float* logits, int64_t vocab, const std::vector<int32_t>& context, const SamplingParams& p,
                     double u);

}  // namespace mtrain::infer
