// An fp64 reference of Megatron-core's router, written from its Python in
// Megatron's own shapes, independently of lib/moe: tokens in Megatron's
// [s, b] order (token m = s * batch + b), dense (tokens, experts) routing
// probs and maps, topk_routing_with_score_function,
// apply_router_token_dropping (get_capacity), compute_routing_scores_for_aux_loss,
// switch_load_balancing_loss_func (aux_loss, and seq_aux_loss through the
// reshape to (seq, batch * experts)) and z_loss_func. Ties go to the lower
// index (torch.topk leaves them open; the tests keep away from them).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "moe/router.h"

namespace mtrain::moe::testing {

struct RefRouting {
  std::vector<double> probs;       // (T, E) Megatron's routing_probs after dropping
  std::vector<uint8_t> map;        // (T, E) routing_map after dropping
  std::vector<double> scores_aux;  // (T, E) scores of the aux-loss routing map
  std::vector<uint8_t> aux_map;    // (T, E) top-k of scores_aux (no bias, no dropping)
  double load_balancing = 0;       // aux / seq-aux loss without its coefficient
  double z = 0;                    // mean logsumexp^2 (without coefficient)
};

// Indices of the k largest v[i] (largest first, ties to the lower index).
inline std::vector<int> ref_topk(const std::vector<double>& v, int k) {
  std::vector<int> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return v[a] > v[b]; });
  idx.resize(k);
  return idx;
}

inline std::vector<double> ref_softmax(const std::vector<double>& l) {
  const double m = *std::max_element(l.begin(), l.end());
  std::vector<double> p(l.size());
  double s = 0;
  for (size_t i = 0; i < l.size(); ++i) s += (p[i] = std::exp(l[i] - m));
  for (double& x : p) x /= s;
  return p;
}

inline double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// topk_routing_with_score_function for one token: (indices, probs).
inline void ref_route_token(const std::vector<double>& l, const std::vector<double>* bias, const RouterConfig& c,
                            std::vector<int>& idx, std::vector<double>& probs) {
  const int k = c.topk;
  probs.assign(k, 0);
  if (c.score_function == ScoreFunction::kSoftmax && c.pre_softmax) {
    const auto s = ref_softmax(l);
    idx = ref_topk(s, k);
    for (int j = 0; j < k; ++j) probs[j] = s[idx[j]];
  } else if (c.score_function == ScoreFunction::kSoftmax) {
    idx = ref_topk(l, k);
    std::vector<double> top(k);
    for (int j = 0; j < k; ++j) top[j] = l[idx[j]];
    probs = ref_softmax(top);
  } else {
    std::vector<double> s(l.size()), sel(l.size());
    for (size_t e = 0; e < l.size(); ++e) sel[e] = s[e] = ref_sigmoid(l[e]);
    if (bias)
      for (size_t e = 0; e < l.size(); ++e) sel[e] += (*bias)[e];
    idx = ref_topk(sel, k);
    double sum = 0;
    for (int j = 0; j < k; ++j) sum += (probs[j] = s[idx[j]]);
    if (k > 1)
      for (double& p : probs) p /= sum + 1e-20;
  }
  if (c.topk_scaling_factor && *c.topk_scaling_factor != 0)
    for (double& p : probs) p *= *c.topk_scaling_factor;
}

// apply_router_token_dropping on dense (T, E) probs / map, in place.
inline void ref_drop(std::vector<double>& probs, std::vector<uint8_t>& map, int64_t T, const RouterConfig& c) {
  if (!c.capacity_factor) return;
  const int64_t E = c.num_experts;
  const int64_t cap = static_cast<int64_t>(std::ceil((static_cast<double>(T * c.topk) / E) * *c.capacity_factor));
  if (cap > T) return;  // every token fits
  std::vector<uint8_t> capacity_mask(T * E, 0);
  for (int64_t e = 0; e < E; ++e) {
    std::vector<double> column(T);
    for (int64_t t = 0; t < T; ++t)
      column[t] = c.drop_policy == DropPolicy::kProbs ? probs[t * E + e] : static_cast<double>(map[t * E + e]);
    for (int t : ref_topk(column, static_cast<int>(cap))) capacity_mask[t * E + e] = 1;
  }
  for (int64_t i = 0; i < T * E; ++i) {
    map[i] = c.pad_to_capacity ? capacity_mask[i] : (map[i] && capacity_mask[i]);
    probs[i] *= map[i];
  }
}

// The whole router on this rank's logits (T, E) in Megatron's [s, b] order,
// for a token group of one rank.
inline RefRouting ref_router(const std::vector<double>& logits, int64_t batch, int64_t seq, const RouterConfig& c,
                             const std::vector<double>* bias) {
  const int64_t T = batch * seq, E = c.num_experts;
  RefRouting r;
  r.probs.assign(T * E, 0);
  r.map.assign(T * E, 0);
  r.scores_aux.assign(T * E, 0);
  r.aux_map.assign(T * E, 0);
  auto& aux_map = r.aux_map;
  std::vector<int> idx;
  std::vector<double> probs;
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<double> l(logits.begin() + t * E, logits.begin() + (t + 1) * E);
    ref_route_token(l, bias, c, idx, probs);
    for (int j = 0; j < c.topk; ++j) {
      r.probs[t * E + idx[j]] = probs[j];
      r.map[t * E + idx[j]] = 1;
    }
    // compute_routing_scores_for_aux_loss
    std::vector<double> s(E);
    if (c.score_function == ScoreFunction::kSoftmax) {
      s = ref_softmax(l);
    } else {
      double sum = 0;
      for (int64_t e = 0; e < E; ++e) sum += (s[e] = ref_sigmoid(l[e]));
      for (double& x : s) x /= sum + 1e-20;
    }
    for (int e : ref_topk(s, c.topk)) aux_map[t * E + e] = 1;
    std::copy(s.begin(), s.end(), r.scores_aux.begin() + t * E);
    const double m = *std::max_element(l.begin(), l.end());
    double z = 0;
    for (double x : l) z += std::exp(x - m);
    r.z += std::pow(m + std::log(z), 2) / static_cast<double>(T);
  }
  ref_drop(r.probs, r.map, T, c);
  // switch_load_balancing_loss_func over `rows` x `cols` (seq_aux_loss: the
  // (seq, batch * E) reshape of the [s, b] token order, divided by batch).
  const bool seq_aux = c.load_balancing == LoadBalancing::kSeqAuxLoss;
  const int64_t rows = seq_aux ? seq : T, cols = seq_aux ? batch * E : E;
  double loss = 0;
  for (int64_t col = 0; col < cols; ++col) {
    double prob_sum = 0, tokens = 0;
    for (int64_t row = 0; row < rows; ++row) {
      prob_sum += r.scores_aux[row * cols + col];
      tokens += aux_map[row * cols + col];
    }
    loss += prob_sum * tokens;
  }
  loss *= static_cast<double>(E) / (c.topk * static_cast<double>(rows) * rows);
  r.load_balancing = seq_aux ? loss / batch : loss;
  return r;
}

// mtrain token n = b * seq + s  <->  Megatron token m = s * batch + b.
inline int64_t megatron_index(int64_t n, int64_t batch, int64_t seq) { return (n % seq) * batch + n / seq; }

// Rows of a (batch * seq, width) mtrain-ordered matrix in Megatron order.
template <class T>
std::vector<T> to_megatron_order(const std::vector<T>& a, int64_t batch, int64_t seq, int64_t width) {
  std::vector<T> out(a.size());
  for (int64_t n = 0; n < batch * seq; ++n)
    std::copy_n(a.begin() + n * width, width, out.begin() + megatron_index(n, batch, seq) * width);
  return out;
}

}  // namespace mtrain::moe::testing
