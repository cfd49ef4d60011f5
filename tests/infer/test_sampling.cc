// Next-token selection against Hugging Face transformers' logits processors,
// whose math is written out here independently (in double):
//   RepetitionPenaltyLogitsProcessor: score < 0 ? score * p : score / p, over the ids of input_ids
//   TemperatureLogitsWarper:          score / t
//   TopKLogitsWarper:                 score < kth largest -> -inf
//   TopPLogitsWarper:                 ascending sort, cumsum(softmax) <= 1 - top_p -> -inf, the top token kept
// applied in that order (generate()'s processor list), then torch.multinomial
// over softmax (here: the inverse CDF of the step's uniform draw).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "infer/sampling.h"

namespace mtrain::infer {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(Sampling, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogitsOnce) {
  std::vector<float> l = {2.0f, -1.0f, 0.5f, -3.0f, 4.0f};
  apply_repetition_penalty(l.data(), 5, {0, 1, 1, 1, 4, 99}, 2.0);  // id 1 three times, 99 outside the vocabulary
  EXPECT_EQ(l, (std::vector<float>{1.0f, -2.0f, 0.5f, -3.0f, 2.0f}));
}

TEST(Sampling, TemperatureDividesEveryLogit) {
  std::vector<float> l = {1.0f, -2.0f, 3.0f};
  apply_temperature(l.data(), 3, 0.5);
  EXPECT_EQ(l, (std::vector<float>{2.0f, -4.0f, 6.0f}));
}

TEST(Sampling, TopKKeepsTiesOfTheKthLogit) {
  std::vector<float> l = {1.0f, 3.0f, 3.0f, 2.0f};
  apply_top_k(l.data(), 4, 2);
  EXPECT_EQ(l, (std::vector<float>{-kInf, 3.0f, 3.0f, -kInf}));
  std::vector<float> one = {1.0f, 3.0f, 3.0f, 2.0f};
  apply_top_k(one.data(), 4, 1);  // both 3s equal the largest
  EXPECT_EQ(one, (std::vector<float>{-kInf, 3.0f, 3.0f, -kInf}));
  std::vector<float> off = {1.0f, 2.0f};
  apply_top_k(off.data(), 2, 0);
  EXPECT_EQ(off, (std::vector<float>{1.0f, 2.0f}));
}

std::vector<float> log_probs(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back(static_cast<float>(std::log(x)));
  return l;
}

TEST(Sampling, TopPRemovesTheUnlikelyTailAndKeepsTheTopToken) {
  // probs 0.1 0.2 0.3 0.4: ascending cumsum 0.1 0.3 0.6 1.0
  std::vector<float> l = log_probs({0.2, 0.1, 0.4, 0.3});
  apply_top_p(l.data(), 4, 0.5);  // remove cumsum <= 0.5: 0.1 and 0.2
  EXPECT_EQ(l[0], -kInf);
  EXPECT_EQ(l[1], -kInf);
  EXPECT_GT(l[2], -kInf);
  EXPECT_GT(l[3], -kInf);
  std::vector<float> tiny = log_probs({0.2, 0.1, 0.4, 0.3});
  apply_top_p(tiny.data(), 4, 1e-9);                      // only the most likely survives
  EXPECT_EQ(tiny[2], static_cast<float>(std::log(0.4)));  // unchanged
  for (int i : {0, 1, 3}) EXPECT_EQ(tiny[i], -kInf);
}

// The HF chain in double: the probability of every id after all processors.
std::vector<double> hf_probs(std::vector<double> s, const std::vector<int32_t>& ctx, const SamplingParams& p) {
  const int64_t V = static_cast<int64_t>(s.size());
  std::vector<bool> seen(s.size(), false);
  for (int32_t id : ctx) seen[id] = true;
  for (int64_t v = 0; v < V; ++v)
    if (seen[v]) s[v] = s[v] < 0 ? s[v] * p.repetition_penalty : s[v] / p.repetition_penalty;
  for (double& x : s) x /= p.temperature;
  std::vector<double> sorted = s;
  std::sort(sorted.rbegin(), sorted.rend());
  for (double& x : s)
    if (p.top_k > 0 && x < sorted[p.top_k - 1]) x = -INFINITY;
  auto softmax = [](const std::vector<double>& x) {
    double m = -INFINITY, z = 0;
    for (double v : x) m = std::max(m, v);
    std::vector<double> e;
    for (double v : x) z += e.emplace_back(std::exp(v - m));
    for (double& v : e) v /= z;
    return e;
  };
  std::vector<double> pr = softmax(s);
  std::vector<int64_t> order(s.size());
  for (int64_t i = 0; i < V; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return s[a] < s[b]; });
  double cum = 0;
  for (int64_t i = 0; i + 1 < V; ++i) {
    cum += pr[order[i]];
    if (cum <= 1 - p.top_p) s[order[i]] = -INFINITY;
  }
  return softmax(s);
}

TEST(Sampling, DrawsFollowTheHfDistributionThroughTheWholeChain) {
  const std::vector<double> logits = {1.0, 2.5, -0.5, 0.3, 2.0, -2.0, 1.7, 0.0};
  const std::vector<int32_t> ctx = {1, 2, 2};
  SamplingParams p;
  p.temperature = 0.7;
  p.top_k = 5;
  p.top_p = 0.8;
  p.repetition_penalty = 1.3;
  const std::vector<double> expect = hf_probs(logits, ctx, p);
  // A grid of uniform draws: the share of each id is its probability within 1/N.
  const int N = 20000;
  std::vector<int> count(logits.size(), 0);
  for (int i = 0; i < N; ++i) {
    std::vector<float> row(logits.begin(), logits.end());
    ++count[select_token(row.data(), static_cast<int64_t>(row.size()), ctx, p, (i + 0.5) / N)];
  }
  for (size_t v = 0; v < logits.size(); ++v) EXPECT_NEAR(count[v] / double(N), expect[v], 1.5 / N) << "id " << v;
  // The chain's order matters: top-k (5 of 8) runs before top-p, so top-p renormalises over 5 ids
  // (here it then drops at least one more): ids outside the HF result are never drawn.
  int kept = 0;
  for (double x : expect) kept += x > 0;
  EXPECT_LT(kept, 5);
}

TEST(Sampling, TopKBeforeTopPDecidesWhatSurvives) {
  // probs 0.05 0.15 0.35 0.45. top-k 2 then top-p 0.5: over {0.4375, 0.5625} the first
  // falls (cumsum 0.4375 <= 0.5): only id 3. (top-p first would keep ids 2 and 3.)
  SamplingParams p;
  p.temperature = 1.0;
  p.top_k = 2;
  p.top_p = 0.5;
  for (double u : {0.0, 0.3, 0.6, 0.999}) {
    std::vector<float> row = log_probs({0.05, 0.15, 0.35, 0.45});
    EXPECT_EQ(select_token(row.data(), 4, {}, p, u), 3);
  }
}

TEST(Sampling, GreedyIsTheArgmaxAfterTheRepetitionPenalty) {
  SamplingParams p;  // temperature 0: greedy
  p.repetition_penalty = 2.0;
  std::vector<float> row = {2.0f, 1.5f, -1.0f};
  EXPECT_EQ(select_token(row.data(), 3, {0}, p, 0.99), 1);  // 2.0 / 2 < 1.5
  std::vector<float> ties = {1.0f, 3.0f, 3.0f};
  p.repetition_penalty = 1.0;
  EXPECT_EQ(select_token(ties.data(), 3, {}, p, 0.5), 1);  // torch.argmax: the first maximum
}

}  // namespace
}  // namespace mtrain::infer
