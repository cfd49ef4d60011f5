// The router's auxiliary losses on this rank's logits (Megatron's
// compute_routing_scores_for_aux_loss + switch_load_balancing_loss_func for
// aux_loss and seq_aux_loss, z_loss_func) and their gradients. The losses
// are never materialised as a graph: the backward adds their analytic
// gradient to d(logits), scaled like MoEAuxLossAutoScaler.
#include <algorithm>
#include <cmath>
#include <vector>

#include "moe/router_internal.h"
#include "parallel/comm.h"

namespace mtrain::moe::detail {

namespace {

// scores (E) for the load-balancing loss: softmax, or sigmoid normalised to
// sum 1 (whatever the routing's pre-softmax, bias or top-k).
void aux_scores(float* scores, const float* logits, const RouterConfig& cfg) {
  const int64_t E = cfg.num_experts;
  if (cfg.score_function == ScoreFunction::kSoftmax) {
    std::copy(logits, logits + E, scores);
    softmax_row(scores, E);
    return;
  }
  double sum = 0.0;
  for (int64_t e = 0; e < E; ++e) {
    scores[e] = sigmoid(logits[e]);
    sum += scores[e];
  }
  for (int64_t e = 0; e < E; ++e) scores[e] = static_cast<float>(scores[e] / (sum + 1e-20));
}

bool seq_aux(const RouterConfig& cfg) { return cfg.load_balancing == LoadBalancing::kSeqAuxLoss; }

// d(loss)/d(aux score e) of a token of sequence b: the loss is
// sum_{r,e} P[r,e] · counts[r,e] · E / (k · T²) (/ batch for seq_aux_loss),
// linear in the scores; r = b (seq_aux_loss) or 0.
double aux_weight(const RouterForward& fwd, const RouterConfig& cfg, int64_t row, int64_t e) {
  const double T = fwd.aux_row_tokens[row];
  double w =
      fwd.aux_tokens_per_expert[row * cfg.num_experts + e] * static_cast<double>(cfg.num_experts) / (cfg.topk * T * T);
  return seq_aux(cfg) ? w / static_cast<double>(fwd.tokens.batch) : w;
}

void load_balancing_forward(RouterForward& out, const RouterConfig& cfg, parallel::Comm& token_group) {
  const int64_t N = out.num_tokens, E = cfg.num_experts;
  const int64_t rows = seq_aux(cfg) ? out.tokens.batch : 1;
  std::vector<float> scores(E);
  std::vector<int32_t> ids(cfg.topk);
  std::vector<double> prob_sums(rows * E, 0.0);  // P[r, e]: this rank's sum of scores
  out.aux_tokens_per_expert.assign(rows * E, 0.f);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t row = seq_aux(cfg) ? out.tokens.sequence_of(n) : 0;
    aux_scores(scores.data(), out.logits.data() + n * E, cfg);
    // The aux routing map: top-k of these scores (no bias, no dropping).
    select_topk(ids.data(), cfg.topk, E, [&](int64_t e) { return scores[e]; });
    for (int j = 0; j < cfg.topk; ++j) out.aux_tokens_per_expert[row * E + ids[j]] += 1.f;
    for (int64_t e = 0; e < E; ++e) prob_sums[row * E + e] += scores[e];
  }
  // Counts are integers: the fp32 sum over the group is exact.
  token_group.all_reduce_sum(out.aux_tokens_per_expert.data(), rows * E);
  out.aux_row_tokens.assign(rows, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t e = 0; e < E; ++e) out.aux_row_tokens[r] += out.aux_tokens_per_expert[r * E + e] / cfg.topk;
  out.aux_total_tokens = out.aux_row_tokens[0];
  double loss = 0.0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t e = 0; e < E; ++e) loss += prob_sums[r * E + e] * aux_weight(out, cfg, r, e);
  (seq_aux(cfg) ? out.losses.seq_load_balancing_loss : out.losses.load_balancing_loss) = loss;
}

}  // namespace

void router_losses_forward(RouterForward& out, const RouterConfig& cfg, parallel::Comm& token_group) {
  out.token_group_size = token_group.size();
  out.aux_active = cfg.load_balancing != LoadBalancing::kNone && cfg.aux_loss_coeff > 0;
  if (out.aux_active) load_balancing_forward(out, cfg, token_group);
  out.z_active = cfg.z_loss_coeff.has_value();
  if (!out.z_active) return;
  // Logged as Megatron's z_loss / coeff: the mean of logsumexp² over this
  // rank's tokens (Megatron divides the coefficient by the token group's
  // size and the logged value by that coefficient). A coefficient of 0
  // logs the same value (Megatron would print 0/0).
  const int64_t N = out.num_tokens, E = cfg.num_experts;
  std::vector<float> row(E);
  double sum = 0.0;
  for (int64_t n = 0; n < N; ++n) {
    std::copy_n(out.logits.data() + n * E, E, row.data());
    const double lse = softmax_row(row.data(), E);
    sum += lse * lse;
  }
  out.losses.z_loss = N > 0 ? sum / static_cast<double>(N) : 0.0;
}

namespace {

// One token's share of the loss gradients: dl (E) ACCUMULATED from logits
// l (E); p, q (E) and w (E) scratch.
void token_losses_backward(float* dl, const float* l, int64_t n, const RouterForward& fwd, const RouterConfig& cfg,
                           double scale, float* p, float* q, double* w) {
  const int64_t N = fwd.num_tokens, E = cfg.num_experts;
  std::copy(l, l + E, p);
  const double lse = softmax_row(p, E);
  if (fwd.z_active) {  // z = coeff/G · mean_n lse_n²: d/dl_e = coeff/G · 2 lse p_e / N
    const double z_coeff = *cfg.z_loss_coeff / static_cast<double>(fwd.token_group_size);
    for (int64_t e = 0; e < E; ++e) dl[e] += static_cast<float>(scale * z_coeff * 2.0 * lse * p[e] / N);
  }
  if (!fwd.aux_active) return;
  const int64_t row = seq_aux(cfg) ? fwd.tokens.sequence_of(n) : 0;
  double dot = 0.0;
  for (int64_t e = 0; e < E; ++e) w[e] = cfg.aux_loss_coeff * aux_weight(fwd, cfg, row, e);
  if (cfg.score_function == ScoreFunction::kSoftmax) {  // scores = p
    for (int64_t e = 0; e < E; ++e) dot += w[e] * p[e];
    for (int64_t e = 0; e < E; ++e) dl[e] += static_cast<float>(scale * p[e] * (w[e] - dot));
    return;
  }
  // scores = s / (S + eps), s = sigmoid(l): ds_m = w_m / D − sum_e w_e s_e / D².
  double sum = 0.0;
  for (int64_t e = 0; e < E; ++e) {
    q[e] = sigmoid(l[e]);
    sum += q[e];
    dot += w[e] * q[e];
  }
  const double D = sum + 1e-20;
  for (int64_t e = 0; e < E; ++e) {
    const double ds = w[e] / D - dot / (D * D);
    dl[e] += static_cast<float>(scale * ds * q[e] * (1.0 - q[e]));
  }
}

}  // namespace

void router_losses_backward(float* dlogits, const RouterForward& fwd, const RouterConfig& cfg, float scale) {
  if (!fwd.aux_active && !fwd.z_active) return;
  const int64_t N = fwd.num_tokens, E = cfg.num_experts;
  // Tokens are independent: any thread split gives the same bits.
#pragma omp parallel if (N * E > (1 << 15))
  {
    std::vector<float> p(E), q(E);
    std::vector<double> w(E);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n)
      token_losses_backward(dlogits + n * E, fwd.logits.data() + n * E, n, fwd, cfg, scale, p.data(), q.data(),
                            w.data());
  }
}

}  // namespace mtrain::moe::detail
