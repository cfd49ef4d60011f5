// An `mtrain infer` model's greedy answer, in the test's process (one
// device): the LoRA infer tests compare adapters served as LoRA layers,
// merged at load and merged by export by their tokens and logits.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "infer/infer_internal.h"
#include "mtrain_runner.h"

namespace mtrain::functional {

// The first greedy answer tokens and each step's logits row.
struct Answer {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};

// 8 greedy tokens after a fixed prompt for `infer` with `args`.
inline Answer greedy_answer(const std::vector<std::string>& args) {
  infer::InferOptions o = infer::parse_infer_args(concat(args, {"--num_threads", "1"}));
  infer::InferModel m = infer::load_infer_model(o, infer::InferContext{});
  infer::GenerationConfig g;
  g.max_new_tokens = 8;
  g.sampling.temperature = 0;
  infer::InferenceSession s(*m.model, *m.dev, m.state);
  Answer a;
  a.tokens = s.generate(m.tokenizer->encode("What colour is a leaf?"), g, {},
                        [&](const std::vector<float>& row) { a.logits.push_back(row); });
  return a;
}

// max |a - b| / max |a| over every step's logits.
inline double rel_diff(const Answer& a, const Answer& b) {
  double num = 0, den = 0;
  for (size_t s = 0; s < std::min(a.logits.size(), b.logits.size()); ++s)
    for (size_t i = 0; i < a.logits[s].size(); ++i) {
      num = std::max(num, static_cast<double>(std::abs(a.logits[s][i] - b.logits[s][i])));
      den = std::max(den, static_cast<double>(std::abs(a.logits[s][i])));
    }
  return num / den;
}

}  // namespace mtrain::functional
