#include "infer/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace mtrain::infer {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Lowest id of the largest logit (torch.argmax's tie rule).
int32_t argmax(const float* logits, int64_t vocab) {
  int64_t best = 0;
  for (int64_t v = 1; v < vocab; ++v)
    if (logits[v] > logits[best]) best = v;
  return static_cast<int32_t>(best);
}

// Softmax probabilities in double (exp(-inf) = 0).
std::vector<double> softmax(const float* logits, int64_t vocab) {
  const float mx = logits[argmax(logits, vocab)];
  std::vector<double> p(static_cast<size_t>(vocab));
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += p[v] = std::exp(static_cast<double>(logits[v]) - mx);
  for (double& x : p) x /= sum;
  return p;
}

}  // namespace

void apply_repetition_penalty(float* logits, int64_t vocab, const std::vector<int32_t>& context, double penalty) {
  if (penalty == 1.0) return;
  // HF gathers the scores of the context ids first, then scatters the
  // penalised ones: a repeated id is penalised once.
  std::vector<int32_t> ids = context;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  const float pen = static_cast<float>(penalty);
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) continue;
    float& x = logits[id];
    x = x < 0 ? x * pen : x / pen;
  }
}

void apply_temperature(float* logits, int64_t vocab, double temperature) {
  const float t = static_cast<float>(temperature);
  for (int64_t v = 0; v < vocab; ++v) logits[v] /= t;
}

void apply_top_k(float* logits, int64_t vocab, int top_k) {
  if (top_k <= 0 || top_k >= vocab) return;
  std::vector<float> sorted(logits, logits + vocab);
  std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<float>());
  const float kth = sorted[top_k - 1];
  for (int64_t v = 0; v < vocab; ++v)
    if (logits[v] < kth) logits[v] = kNegInf;
}

void apply_top_p(float* logits, int64_t vocab, double top_p) {
  if (top_p >= 1.0) return;
  const std::vector<double> p = softmax(logits, vocab);
  std::vector<int64_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  // Ascending by logit (a stable sort keeps equal logits in id order).
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return logits[a] < logits[b]; });
  double cum = 0;
  for (int64_t i = 0; i + 1 < vocab; ++i) {  // the last (most likely) token always stays
    cum += p[order[i]];
    if (cum <= 1.0 - top_p) logits[order[i]] = kNegInf;
  }
}

int32_t select_token(float* logits, int64_t vocab, const std::vector<int32_t>& context, const SamplingParams& p,
                     double u) {
  apply_repetition_penalty(logits, vocab, context, p.repetition_penalty);
  if (p.greedy()) return argmax(logits, vocab);
  apply_temperature(logits, vocab, p.temperature);
  apply_top_k(logits, vocab, p.top_k);
  apply_top_p(logits, vocab, p.top_p);
  const std::vector<double> prob = softmax(logits, vocab);
  double cum = 0;
  int32_t last = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    if (prob[v] <= 0) continue;
    last = static_cast<int32_t>(v);
    cum += prob[v];
    if (cum > u) return last;
  }
  return last;  // u within rounding of 1: the last possible token
}

}  // namespace mtrain::infer
