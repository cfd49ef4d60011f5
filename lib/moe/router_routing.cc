// Per-token top-k routing and its backward (Megatron's
// topk_routing_with_score_function), and capacity dropping
// (apply_router_token_dropping). Scores and probabilities are computed in
// double and rounded once to fp32, so each is within an ulp of exact.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "moe/router_internal.h"

namespace mtrain::moe::detail {

namespace {

// Megatron's `if scaling_factor:` — None and 0 both mean no scaling.
double scale_of(const RouterConfig& cfg) {
  return cfg.topk_scaling_factor && *cfg.topk_scaling_factor != 0.0 ? *cfg.topk_scaling_factor : 1.0;
}

}  // namespace

double softmax_row(float* row, int64_t E) {
  double max = -INFINITY;
  for (int64_t e = 0; e < E; ++e) max = std::fmax(max, static_cast<double>(row[e]));
  double sum = 0.0;
  for (int64_t e = 0; e < E; ++e) sum += std::exp(static_cast<double>(row[e]) - max);
  for (int64_t e = 0; e < E; ++e) row[e] = static_cast<float>(std::exp(static_cast<double>(row[e]) - max) / sum);
  return max + std::log(sum);
}

float sigmoid(float x) { return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x)))); }

void route_token(int32_t* ids, float* probs, const float* logits, const float* bias, float* scratch,
                 const RouterConfig& cfg) {
  const int64_t E = cfg.num_experts;
  const int k = cfg.topk;
  const double scale = scale_of(cfg);
  if (cfg.score_function == ScoreFunction::kSoftmax) {
    if (cfg.pre_softmax) {  // softmax over all experts, top-k of the probabilities
      std::copy(logits, logits + E, scratch);
      softmax_row(scratch, E);
      select_topk(ids, k, E, [&](int64_t e) { return scratch[e]; });
      for (int j = 0; j < k; ++j) probs[j] = static_cast<float>(scratch[ids[j]] * scale);
    } else {  // top-k of the logits, softmax over those k
      select_topk(ids, k, E, [&](int64_t e) { return logits[e]; });
      for (int j = 0; j < k; ++j) scratch[j] = logits[ids[j]];
      softmax_row(scratch, k);
      for (int j = 0; j < k; ++j) probs[j] = static_cast<float>(scratch[j] * scale);
    }
    return;
  }
  // sigmoid: the bias moves the selection only; top-k > 1 renormalises.
  for (int64_t e = 0; e < E; ++e) scratch[e] = sigmoid(logits[e]);
  if (bias) {
    select_topk(ids, k, E, [&](int64_t e) { return scratch[e] + bias[e]; });
  } else {
    select_topk(ids, k, E, [&](int64_t e) { return scratch[e]; });
  }
  double sum = 0.0;
  for (int j = 0; j < k; ++j) sum += scratch[ids[j]];
  const double denom = k > 1 ? sum + 1e-20 : 1.0;
  for (int j = 0; j < k; ++j) probs[j] = static_cast<float>(scratch[ids[j]] / denom * scale);
}

void route_token_backward(float* dlogits, const float* dprobs, const int32_t* ids, const float* logits, float* scratch,
                          const RouterConfig& cfg) {
  const int64_t E = cfg.num_experts;
  const int k = cfg.topk;
  const double scale = scale_of(cfg);
  std::fill(dlogits, dlogits + E, 0.f);
  double dot = 0.0;  // sum_j g_j * prob_j before scaling
  if (cfg.score_function == ScoreFunction::kSoftmax && cfg.pre_softmax) {
    // probs_j = p[ids_j]: dl_e = p_e * (g_e - sum_j g_j p[ids_j]).
    std::copy(logits, logits + E, scratch);
    softmax_row(scratch, E);
    for (int j = 0; j < k; ++j) dot += scale * dprobs[j] * scratch[ids[j]];
    for (int64_t e = 0; e < E; ++e) dlogits[e] = static_cast<float>(-scratch[e] * dot);
    for (int j = 0; j < k; ++j) dlogits[ids[j]] = static_cast<float>(scratch[ids[j]] * (scale * dprobs[j] - dot));
  } else if (cfg.score_function == ScoreFunction::kSoftmax) {
    // probs_j = q_j = softmax over the selected logits.
    for (int j = 0; j < k; ++j) scratch[j] = logits[ids[j]];
    softmax_row(scratch, k);
    for (int j = 0; j < k; ++j) dot += scale * dprobs[j] * scratch[j];
    for (int j = 0; j < k; ++j) dlogits[ids[j]] = static_cast<float>(scratch[j] * (scale * dprobs[j] - dot));
  } else {
    // probs_j = s_j / (S + eps) (k > 1) or s_j; ds_j -> dl_j = ds_j * s_j (1 - s_j).
    double sum = 0.0;
    for (int j = 0; j < k; ++j) {
      scratch[j] = sigmoid(logits[ids[j]]);
      sum += scratch[j];
      dot += scale * dprobs[j] * scratch[j];
    }
    const double denom = k > 1 ? sum + 1e-20 : 1.0;
    for (int j = 0; j < k; ++j) {
      double ds = scale * dprobs[j] / denom;
      if (k > 1) ds -= dot / (denom * denom);
      dlogits[ids[j]] = static_cast<float>(ds * scratch[j] * (1.0 - scratch[j]));
    }
  }
}

void drop_over_capacity(RouterForward& out, float* expert_counts, const RouterTokens& tokens, const RouterConfig& cfg) {
  const int64_t N = tokens.count(), E = cfg.num_experts;
  const int k = cfg.topk;
  out.kept.assign(N * k, 1);
  out.capacity = cfg.capacity_factor ? expert_capacity(N, E, k, *cfg.capacity_factor) : -1;
  if (out.capacity >= 0 && out.capacity < N) {
    // Megatron keeps, per expert, the top-`capacity` tokens of its column:
    // by prob ("probs"), or the earliest in Megatron's [s, b] token order
    // ("position"; mtrain's token (b, s) has the key s * batch + b).
    std::vector<int64_t> pairs(N * k);
    std::iota(pairs.begin(), pairs.end(), 0);
    const auto key = [&](int64_t pair) { return tokens.megatron_order(pair / k); };
    const bool by_probs = cfg.drop_policy == DropPolicy::kProbs;
    std::stable_sort(pairs.begin(), pairs.end(), [&](int64_t a, int64_t b) {
      if (out.expert_ids[a] != out.expert_ids[b]) return out.expert_ids[a] < out.expert_ids[b];
      if (by_probs && out.probs[a] != out.probs[b]) return out.probs[a] > out.probs[b];
      return key(a) < key(b);
    });
    int64_t rank_in_expert = 0;
    for (int64_t i = 0; i < N * k; ++i) {
      rank_in_expert = i > 0 && out.expert_ids[pairs[i]] == out.expert_ids[pairs[i - 1]] ? rank_in_expert + 1 : 0;
      if (rank_in_expert >= out.capacity) {
        out.kept[pairs[i]] = 0;
        out.probs[pairs[i]] = 0.f;
      }
    }
  }
  out.tokens_per_expert.assign(E, 0);
  for (int64_t i = 0; i < N * k; ++i) out.tokens_per_expert[out.expert_ids[i]] += out.kept[i];
  if (expert_counts) add_routing_counts(expert_counts, out, cfg);
}

}  // namespace mtrain::moe::detail

namespace mtrain::moe {

void add_routing_counts(float* expert_counts, const RouterForward& fwd, const RouterConfig& cfg) {
  // Megatron counts its routing_map after dropping: with padding that map is
  // the capacity mask, min(capacity, N) tokens in every expert's column.
  const bool padded = cfg.pad_to_capacity && fwd.capacity >= 0;
  for (int64_t e = 0; e < cfg.num_experts; ++e)
    expert_counts[e] += padded ? static_cast<float>(std::min(fwd.capacity, fwd.num_tokens))
                               : static_cast<float>(fwd.tokens_per_expert[e]);
}

}  // namespace mtrain::moe
