// The router's forward/backward pair around the gate GEMM, and the
// expert-bias update. Routing per token: router_routing.cc; losses:
// router_losses.cc.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "moe/router_internal.h"
#include "parallel/comm.h"
#include "profiler/kernel_region.h"
#include "tensor/linear.h"

namespace mtrain::moe {

namespace {

// Below this many (token, expert) scores a parallel region costs more than it saves.
constexpr int64_t kParallelMin = 1 << 15;

void check_shapes(const float* expert_bias, const RouterTokens& tokens, const RouterConfig& cfg) {
  if (cfg.num_experts < 1 || cfg.topk < 1 || cfg.topk > cfg.num_experts)
    throw std::invalid_argument("router: topk " + std::to_string(cfg.topk) + " must be in [1, num_experts " +
                                std::to_string(cfg.num_experts) + "]");
  const bool shard = tokens.local >= 0;
  if (tokens.batch < 0 || tokens.seq < 0 || tokens.first < 0 ||
      (shard && (tokens.seq == 0 || tokens.first + tokens.local > tokens.batch * tokens.seq)))
    throw std::invalid_argument("router: token layout out of range");
  if ((expert_bias != nullptr) != cfg.enable_expert_bias)
    throw std::invalid_argument("router: an expert_bias buffer is required exactly with enable_expert_bias");
}

// The routing pass over the fp32 logits (N, E): score function, top-k and
// their probabilities per token, memory-bound (the logits read, the ids and
// probabilities written; a few operations per score).
profiler::Region routing_region(int64_t N, int64_t E, int k) {
  return profiler::memory_kernel("router_topk", 4.0 * N * E + 8.0 * N * k, 4.0 * N * E);
}
// Its backward: the logits and the probabilities' gradient read, the logits' written.
profiler::Region routing_backward_region(int64_t N, int64_t E, int k) {
  return profiler::memory_kernel("router_topk_backward", 8.0 * N * E + 4.0 * N * k, 4.0 * N * E);
}

}  // namespace

void router_forward(RouterForward& out, float* expert_counts, const float* x, const float* weight,
                    const float* expert_bias, const RouterTokens& tokens, const RouterConfig& cfg, bool training,
                    parallel::Comm& token_group) {
  check_shapes(expert_bias, tokens, cfg);
  const int64_t N = tokens.count(), E = cfg.num_experts, C = cfg.hidden;
  const int k = cfg.topk;
  out.num_tokens = N;
  out.tokens = tokens;
  out.losses = {};
  out.aux_active = out.z_active = false;
  out.token_group_size = token_group.size();
  if (profiler::shape_only()) {  // a dry run: the gate GEMM and the routing pass, priced as a real run's
    kernels::linear_forward(nullptr, x, weight, nullptr, N, C, E);
    profiler::Scope prof(routing_region(N, E, k));
    // ... and the load-balancing loss's sum of the tokens per expert over the token group (router_losses.cc).
    if (training && cfg.load_balancing != LoadBalancing::kNone && cfg.aux_loss_coeff > 0) {
      const int64_t rows = cfg.load_balancing == LoadBalancing::kSeqAuxLoss ? tokens.batch : 1;
      token_group.all_reduce_sum(static_cast<float*>(nullptr), rows * E);
    }
    return;
  }
  out.logits.resize(N * E);
  out.expert_ids.resize(N * k);
  out.probs.resize(N * k);
  kernels::linear_forward(out.logits.data(), x, weight, nullptr, N, C, E);  // fp32 router
  profiler::Scope prof(routing_region(N, E, k));
  // Tokens are independent: any thread split gives the same bits.
#pragma omp parallel if (N * E > kParallelMin)
  {
    std::vector<float> scratch(E);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n)
      detail::route_token(out.expert_ids.data() + n * k, out.probs.data() + n * k, out.logits.data() + n * E,
                          expert_bias, scratch.data(), cfg);
  }
  detail::drop_over_capacity(out, training ? expert_counts : nullptr, tokens, cfg);
  if (training) detail::router_losses_forward(out, cfg, token_group);
}

void router_probs_backward(float* dlogits, const float* dprobs, const RouterForward& fwd, const RouterConfig& cfg,
                           float aux_grad_scale) {
  const int64_t N = fwd.num_tokens, E = cfg.num_experts;
  const int k = cfg.topk;
  profiler::Scope prof(routing_backward_region(N, E, k));
  if (profiler::shape_only()) return;
#pragma omp parallel if (N * E > kParallelMin)
  {
    std::vector<float> scratch(E), masked(k);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      // A dropped pair's prob is the constant 0 (Megatron multiplies by the mask).
      for (int j = 0; j < k; ++j) masked[j] = fwd.kept[n * k + j] ? dprobs[n * k + j] : 0.f;
      detail::route_token_backward(dlogits + n * E, masked.data(), fwd.expert_ids.data() + n * k,
                                   fwd.logits.data() + n * E, scratch.data(), cfg);
    }
  }
  detail::router_losses_backward(dlogits, fwd, cfg, aux_grad_scale);
}

void router_backward(float* dx, float* dweight, float* dlogits, const float* dprobs, const RouterForward& fwd,
                     const float* x, const float* weight, const RouterConfig& cfg, float aux_grad_scale) {
  const int64_t N = fwd.num_tokens, E = cfg.num_experts, C = cfg.hidden;
  router_probs_backward(dlogits, dprobs, fwd, cfg, aux_grad_scale);
  // dweight (E, C) += dlogits^T · x.
  kernels::linear_backward(nullptr, dweight, nullptr, dlogits, x, weight, N, C, E);
  // (A dry run's buffers are all null: it prices the input gradient a real run computes.)
  if ((dx == nullptr && !profiler::shape_only()) || N == 0 || C == 0) return;
  // dx (N, C) += dlogits (N, E) · W_r (E, C): accumulated onto the experts' input gradient.
  profiler::Scope prof(profiler::gemm_kernel("router_backward_dinp", N, C, E));
  if (profiler::shape_only()) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(N), static_cast<int>(C), static_cast<int>(E),
              1.0f, dlogits, static_cast<int>(E), weight, static_cast<int>(C), 1.0f, dx, static_cast<int>(C));
}

void expert_bias_update(float* expert_bias, float* counts, int64_t rows, int64_t num_experts, double rate,
                        parallel::Comm& tp_dp_cp_group) {
  // Counts are integers below 2^24: the fp32 sums are exact in any order.
  tp_dp_cp_group.all_reduce_sum(counts, rows * num_experts);
  const float step = static_cast<float>(rate);
  for (int64_t r = 0; r < rows; ++r) {
    float* c = counts + r * num_experts;
    float* bias = expert_bias + r * num_experts;
    double total = 0.0;
    for (int64_t e = 0; e < num_experts; ++e) total += c[e];
    const float mean = static_cast<float>(total / static_cast<double>(num_experts));
    for (int64_t e = 0; e < num_experts; ++e) {
      const float offset = mean - c[e];
      bias[e] += offset > 0 ? step : (offset < 0 ? -step : 0.f);
    }
    std::fill(c, c + num_experts, 0.f);
  }
}

}  // namespace mtrain::moe
