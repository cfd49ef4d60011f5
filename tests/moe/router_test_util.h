// Fixtures of the router tests: a random routing problem (tokens, gate
// weight, expert bias, upstream gradient weights), the fp64 reference loss
// over it, and mtrain's forward + backward on it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "moe/router.h"
#include "parallel/local_comm.h"
#include "router_reference.h"
#include "test_util/fp32_bounds.h"

namespace mtrain::moe::testing {

inline constexpr double kFp64Unit = 0x1p-53;

struct Problem {
  RouterConfig cfg;
  int64_t batch = 2, seq = 6;
  std::vector<float> x;     // (N, C) mtrain token order
  std::vector<float> w;     // (E, C)
  std::vector<float> bias;  // (E) when cfg.enable_expert_bias
  std::vector<double> up;   // (N, E): the loss is sum_{n,e} up[n,e] * routing_probs[n,e] + aux terms
  float aux_grad_scale = 0.75f;
  int64_t tokens() const { return batch * seq; }
};

// Uniform in [-a, a) from mt19937's specified output (portable, unlike std distributions).
inline double uniform(std::mt19937& g, double a) { return ((g() >> 8) * 0x1p-24 * 2.0 - 1.0) * a; }

inline Problem make_problem(const RouterConfig& cfg, uint32_t seed, int64_t batch = 2, int64_t seq = 6) {
  Problem p;
  p.cfg = cfg;
  p.batch = batch;
  p.seq = seq;
  std::mt19937 g(seed);
  const int64_t N = p.tokens(), C = cfg.hidden, E = cfg.num_experts;
  for (int64_t i = 0; i < N * C; ++i) p.x.push_back(static_cast<float>(uniform(g, 1.0)));
  for (int64_t i = 0; i < E * C; ++i) p.w.push_back(static_cast<float>(uniform(g, 0.6)));
  if (cfg.enable_expert_bias)
    for (int64_t e = 0; e < E; ++e) p.bias.push_back(static_cast<float>(uniform(g, 0.2)));
  for (int64_t i = 0; i < N * E; ++i) p.up.push_back(uniform(g, 1.0));
  return p;
}

// logits (N, E) = x · W^T in double, mtrain token order.
inline std::vector<double> ref_logits(const std::vector<double>& x, const std::vector<double>& w, int64_t N, int64_t C,
                                      int64_t E) {
  std::vector<double> l(N * E, 0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t e = 0; e < E; ++e)
      for (int64_t c = 0; c < C; ++c) l[n * E + e] += x[n * C + c] * w[e * C + c];
  return l;
}

// The scalar the gradient tests differentiate, through the fp64 reference:
// sum up·probs + scale·(aux_coeff·load_balancing + z_coeff·z).
inline double ref_loss(const Problem& p, const std::vector<double>& x, const std::vector<double>& w,
                       RefRouting* routing = nullptr) {
  const RouterConfig& c = p.cfg;
  const int64_t E = c.num_experts;
  const auto logits = ref_logits(x, w, p.tokens(), c.hidden, E);
  std::vector<double> bias(p.bias.begin(), p.bias.end());
  const auto r = ref_router(to_megatron_order(logits, p.batch, p.seq, E), p.batch, p.seq, c,
                            c.enable_expert_bias ? &bias : nullptr);
  const auto up = to_megatron_order(p.up, p.batch, p.seq, E);
  double loss = 0;
  for (size_t i = 0; i < up.size(); ++i) loss += up[i] * r.probs[i];
  double aux = 0;
  if (c.load_balancing != LoadBalancing::kNone && c.aux_loss_coeff > 0) aux += c.aux_loss_coeff * r.load_balancing;
  if (c.z_loss_coeff) aux += *c.z_loss_coeff * r.z;
  if (routing) *routing = r;
  return loss + p.aux_grad_scale * aux;
}

// mtrain's router on the problem (training): forward, then the backward of
// ref_loss's upstream weights. dx (N, C) and dw (E, C) start at zero.
struct MtrainRun {
  RouterForward fwd;
  std::vector<float> dx, dw, dlogits;
  std::vector<float> expert_counts;
};

inline MtrainRun run_router(const Problem& p, parallel::Comm& group, const float* x, const RouterTokens& tokens,
                            const std::vector<double>& up) {
  const RouterConfig& c = p.cfg;
  const int64_t N = tokens.count(), E = c.num_experts, k = c.topk;
  MtrainRun r;
  r.expert_counts.assign(E, 0.f);
  router_forward(r.fwd, r.expert_counts.data(), x, p.w.data(), c.enable_expert_bias ? p.bias.data() : nullptr, tokens,
                 c, /*training=*/true, group);
  std::vector<float> dprobs(N * k);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < k; ++j) dprobs[n * k + j] = static_cast<float>(up[n * E + r.fwd.expert_ids[n * k + j]]);
  r.dx.assign(N * c.hidden, 0.f);
  r.dw.assign(E * c.hidden, 0.f);
  r.dlogits.assign(N * E, 0.f);
  router_backward(r.dx.data(), r.dw.data(), r.dlogits.data(), dprobs.data(), r.fwd, x, p.w.data(), c, p.aux_grad_scale);
  return r;
}

inline MtrainRun run_router(const Problem& p) {
  parallel::SelfComm self;
  return run_router(p, self, p.x.data(), RouterTokens{p.batch, p.seq}, p.up);
}

// max_{n,e} sum_c |x[n,c] W[e,c]|: bounds the fp32 error of a logit by gamma_C times it.
inline double logit_l1_max(const Problem& p) {
  double m = 0;
  const int64_t C = p.cfg.hidden;
  for (int64_t n = 0; n < p.tokens(); ++n)
    for (int64_t e = 0; e < p.cfg.num_experts; ++e) {
      double s = 0;
      for (int64_t c = 0; c < C; ++c) s += std::fabs(double{p.x[n * C + c]} * p.w[e * C + c]);
      m = std::fmax(m, s);
    }
  return m;
}

// Norm-relative bound between two fp32 evaluations of the router's
// gradients (or one against an exact reference): the logits carry
// gamma_C * sum|x W| (logit_l1_max), which moves each dlogits term (a
// product of <= 3 score-function factors, each changing by <= 2x the logit
// error relatively); then <= 4 rounding stages of sums of <= K terms (score
// backward, loss gradients, the two GEMMs).
inline double gradient_rtol(const Problem& p) {
  const int64_t C = p.cfg.hidden;
  const int64_t K = std::max({p.tokens(), C, p.cfg.num_experts + p.cfg.topk});
  return 2 * 4 * mtrain::testing::fp32_gamma(K) + 2 * 3 * 2 * mtrain::testing::fp32_gamma(C) * logit_l1_max(p);
}

// A router configuration with a name for SCOPED_TRACE.
struct NamedConfig {
  std::string name;
  RouterConfig cfg;
};

inline RouterConfig base_config() {
  RouterConfig c;
  c.num_experts = 6;
  c.hidden = 8;
  c.topk = 2;
  return c;
}

}  // namespace mtrain::moe::testing
