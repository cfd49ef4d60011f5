// Internal to lib/moe: the pieces router_forward / router_probs_backward are
// built from (router.cc), one token row or one loss at a time.
#pragma once

#include <cstdint>

#include "moe/router.h"

namespace mtrain::moe::detail {

// row (E): softmax in place (max-subtracted; sums in double). Returns
// logsumexp of the input row.
double softmax_row(float* row, int64_t E);
float sigmoid(float x);

// ids (k) = the k largest value(e) over e < E, largest first; ties go to the
// lower expert index (strict >), NaN never wins. O(k·E): E is small.
template <class Value>
void select_topk(int32_t* ids, int k, int64_t E, Value value) {
  for (int j = 0; j < k; ++j) {
    int64_t best = -1;
    for (int64_t e = 0; e < E; ++e) {
      bool taken = false;
      for (int m = 0; m < j; ++m) taken = taken || ids[m] == e;
      if (taken) continue;
      if (best < 0 || value(e) > value(best)) best = e;
    }
    ids[j] = static_cast<int32_t>(best);
  }
}

// One token: ids (k) and probs (k) from logits (E) (topk_routing_with_score_function).
// bias (E) or null; scratch (E).
void route_token(int32_t* ids, float* probs, const float* logits, const float* bias, float* scratch,
                 const RouterConfig& cfg);
// One token: dlogits (E) OVERWRITTEN from dprobs (k) (already masked by kept).
// scratch (E).
void route_token_backward(float* dlogits, const float* dprobs, const int32_t* ids, const float* logits, float* scratch,
                          const RouterConfig& cfg);

// Capacity dropping (apply_router_token_dropping) on out.expert_ids/probs:
// fills out.kept, out.capacity, zeroes dropped probs; adds Megatron's
// routing_map column sums to expert_counts (E) if not null.
void drop_over_capacity(RouterForward& out, float* expert_counts, const RouterTokens& tokens, const RouterConfig& cfg);

// The load-balancing loss (aux_loss / seq_aux_loss) and the z-loss on
// out.logits: values into out.losses, backward state into out.
void router_losses_forward(RouterForward& out, const RouterConfig& cfg, parallel::Comm& token_group);
// dlogits (N, E) ACCUMULATED += scale · d(active losses)/d(logits).
void router_losses_backward(float* dlogits, const RouterForward& fwd, const RouterConfig& cfg, float scale);

}  // namespace mtrain::moe::detail
