// The MoE router (Megatron-core's TopKRouter) as a forward/backward pair over
// this rank's tokens, without the token dispatch (the MoE layer does that):
//
//   logits (N, E) = x (N, C) · W_r (E, C)^T             fp32, W_r replicated
//   scores        = softmax | sigmoid (+ expert bias for selection only)
//   top-k         → expert_ids (N, k), probs (N, k)     combine weights
//   capacity      → kept (N, k)                         dropped pairs have prob 0
//   aux losses    → load-balancing (aux_loss | seq_aux_loss) and z-loss,
//                   whose gradients the backward adds to d(logits) with
//                   Megatron's MoEAuxLossAutoScaler scale.
//
// Semantics follow megatron/core/transformer/moe/router.py and moe_utils.py
// (topk_routing_with_score_function, compute_routing_scores_for_aux_loss,
// switch_load_balancing_loss_func, z_loss_func, apply_router_token_dropping,
// get_capacity, get_updated_expert_bias). RouterTokens says where this
// rank's tokens sit in the micro-batch (mtrain's (B, T) token order).
//
// Reductions are explicit: `token_group` is the group whose ranks hold
// disjoint token shards of the same micro-batch (Megatron's tp_cp_group:
// TP×CP with sequence parallelism, CP alone without it); a single rank passes
// a SelfComm. The expert-bias update reduces over TP×DP×CP (its own group).
//
// Ties (equal scores, equal probs) are broken towards the lower expert index
// and, for capacity, the earlier token in Megatron's [s, b] order; Megatron
// leaves them to torch.topk, so tests keep away from ties.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace mtrain::config {
struct Args;
}
namespace mtrain::parallel {
class Comm;
}

namespace mtrain::moe {

enum class ScoreFunction { kSoftmax, kSigmoid };            // --moe_router_score_function
enum class LoadBalancing { kAuxLoss, kSeqAuxLoss, kNone };  // --moe_router_load_balancing_type
enum class DropPolicy { kProbs, kPosition };                // --moe_token_drop_policy

// One layer's router settings (Megatron's TransformerConfig moe_router_* fields).
struct RouterConfig {
  int64_t num_experts = 0;  // E (--num_experts)
  int64_t hidden = 0;       // C (--hidden_size)
  int topk = 2;             // k (--moe_router_topk)
  ScoreFunction score_function = ScoreFunction::kSoftmax;
  // softmax: softmax over all E logits, then top-k of the probabilities
  // (true) vs top-k of the logits, then softmax over those k (false).
  // Ignored by sigmoid (as in Megatron).
  bool pre_softmax = false;
  std::optional<double> topk_scaling_factor;  // probs *= factor (None/0: no scaling)
  LoadBalancing load_balancing = LoadBalancing::kAuxLoss;
  double aux_loss_coeff = 0.0;         // 0: no load-balancing loss
  std::optional<double> z_loss_coeff;  // None: no z-loss
  // Aux-loss-free balancing (sigmoid only): selection uses sigmoid + bias,
  // the combine weights do not; the bias moves by ±rate per update.
  bool enable_expert_bias = false;
  double bias_update_rate = 1e-3;
  std::optional<double> capacity_factor;  // None: no dropping
  DropPolicy drop_policy = DropPolicy::kProbs;
  bool pad_to_capacity = false;  // the dispatcher pads each expert's input to `capacity` rows
};

// From validated Args (config/validate_moe_router.cc checked them) and the
// layer's expert count (--num_experts).
RouterConfig router_config_from_args(const config::Args& args, int64_t num_experts);

// Megatron's get_capacity(num_tokens * topk, E, factor):
// ceil(num_tokens * topk / E * capacity_factor), per expert, for this rank's tokens.
int64_t expert_capacity(int64_t num_tokens, int64_t num_experts, int topk, double capacity_factor);

// How this rank's tokens sit in the micro-batch (seq_aux_loss needs the
// sequences, position dropping their order). Two layouts:
// - every sequence split over the token group (Megatron's sequence and
//   context parallelism; one rank): `batch` sequences of `seq` tokens on
//   this rank, token n = b * seq + s; first = 0, local = -1;
// - a contiguous shard (mtrain's sequence parallelism, parallel/README.md):
//   `batch` sequences of `seq` tokens in the whole micro-batch, this rank
//   holding tokens [first, first + local) of its b * seq + s order.
struct RouterTokens {
  int64_t batch = 1;   // sequences
  int64_t seq = 0;     // tokens of each sequence (on this rank in the first layout)
  int64_t first = 0;   // contiguous shard: this rank's first token
  int64_t local = -1;  // contiguous shard: this rank's token count; -1: the first layout
  int64_t count() const { return local >= 0 ? local : batch * seq; }
  int64_t sequence_of(int64_t n) const { return (first + n) / seq; }
  // Megatron's [s, b] order of token n (capacity's position policy).
  int64_t megatron_order(int64_t n) const { return ((first + n) % seq) * batch + (first + n) / seq; }
};

// Loss values for logging, before their coefficient, for one layer and one
// micro-batch on this rank (what Megatron's router records in its metrics
// tracker). Megatron's log line shows, for each name, the value summed over
// `token_group` (load-balancing) / averaged over TP×DP×CP (z_loss), averaged
// over DP, divided by the number of micro-batches (accumulated) and averaged
// over the MoE layers: ` load_balancing_loss: X |`, ` seq_load_balancing_loss: X |`,
// ` z_loss: X |`. Unset when the loss is off or not training.
struct RouterLossValues {
  std::optional<double> load_balancing_loss = {};      // aux_loss: this rank's share of the layer's value
  std::optional<double> seq_load_balancing_loss = {};  // seq_aux_loss: this rank's share
  std::optional<double> z_loss = {};                   // mean over this rank's tokens of logsumexp(logits)^2
};

// One layer's routing of one micro-batch: the outputs, and what the backward
// needs. Reused across calls (vectors are resized, not reallocated).
struct RouterForward {
  int64_t num_tokens = 0;                  // N
  RouterTokens tokens;                     // the layout routed (N = tokens.count())
  std::vector<float> logits;               // (N, E) x · W_r^T
  std::vector<int32_t> expert_ids;         // (N, k) selected experts, highest selection score first
  std::vector<float> probs;                // (N, k) combine weights; 0 where dropped
  std::vector<uint8_t> kept;               // (N, k) 1: dispatched to expert_ids; 0: dropped by capacity
  std::vector<int64_t> tokens_per_expert;  // (E) kept (token, expert) pairs on this rank
  int64_t capacity = -1;                   // per expert on this rank (expert_capacity); -1: no capacity factor
  RouterLossValues losses;
  // Load-balancing state for the backward: (E) (aux_loss) or (batch, E)
  // (seq_aux_loss) token counts of the aux routing map (top-k of the scores,
  // without bias or dropping), summed over token_group, and the matching
  // token totals T (rows): the group's tokens (aux: N·|group|) or each
  // sequence's (seq), as sum_e counts / k (Megatron's padding-mask path;
  // equal to its N·|group| when every rank routes N tokens).
  std::vector<float> aux_tokens_per_expert;
  double aux_total_tokens = 0;         // aux_row_tokens[0]
  std::vector<double> aux_row_tokens;  // (rows)
  bool aux_active = false;             // training with a load-balancing loss (coeff > 0)
  bool z_active = false;               // training with a z-loss
  int64_t token_group_size = 1;
};

// Routes this rank's tokens. x (N, C), weight (E, C), expert_bias (E) or
// null (required iff cfg.enable_expert_bias). training: computes the aux and
// z losses (collectives on token_group: every rank of the group calls this
// with the same N) and adds each token's routing (after dropping, as
// Megatron's routing_map) to expert_counts (E) ACCUMULATED, if not null.
// Dropping applies in training and evaluation alike. A recomputed forward
// (activation recompute) must pass expert_counts = null, so each token is
// counted once, as Megatron counts only under grad mode. In a shape-only
// run (profiler::shape_only()) only the gate GEMM is reported; nothing is
// routed (buffers may be null).
void router_forward(RouterForward& out, float* expert_counts, const float* x, const float* weight,
                    const float* expert_bias, const RouterTokens& tokens, const RouterConfig& cfg, bool training,
                    parallel::Comm& token_group);

// dlogits (N, E) OVERWRITTEN: from dprobs (N, k) (the loss gradient of
// fwd.probs; dropped pairs contribute nothing) plus, when active, the
// load-balancing and z-loss gradients times aux_grad_scale = d(total
// loss)/d(each aux loss), as Megatron's MoEAuxLossAutoScaler makes it:
// - loss averaged per micro-batch (Megatron's default): loss_scale /
//   num_microbatches (its main_loss_backward_scale);
// - per-token loss over the global batch (calculate_per_token_loss, as
//   Megatron-SWIFT and mtrain's trainer): Megatron multiplies each aux loss
//   by the router's token count times the token group's size before the
//   autoscaler and divides every gradient by the global batch's loss tokens,
//   so aux_grad_scale = loss_scale · N · |token_group| / (loss tokens of the
//   global batch) — about 1 / (num_microbatches · DP) of the loss scale,
//   not the weight of one token.
void router_probs_backward(float* dlogits, const float* dprobs, const RouterForward& fwd, const RouterConfig& cfg,
                           float aux_grad_scale);

// Full backward through the gate: dx (N, C) ACCUMULATED += dlogits · W_r
// (skipped if null), dweight (E, C) ACCUMULATED += dlogits^T · x (skipped if
// null). dlogits (N, E) scratch, OVERWRITTEN (router_probs_backward).
// Each rank's dweight covers its own tokens: under sequence or context
// parallelism the layer sums it over the token group like any
// sequence-parallel replicated weight (Megatron marks the router weight
// `sequence_parallel`).
void router_backward(float* dx, float* dweight, float* dlogits, const float* dprobs, const RouterForward& fwd,
                     const float* x, const float* weight, const RouterConfig& cfg, float aux_grad_scale);

// Adds fwd's routing map after dropping (Megatron's routing_map.sum(0):
// the kept pairs per expert; with padding to capacity, min(capacity, N) in
// every expert) to expert_counts (E) ACCUMULATED: what the aux-loss-free
// bias update counts (router_forward does it when given expert_counts).
void add_routing_counts(float* expert_counts, const RouterForward& fwd, const RouterConfig& cfg);

// Megatron's _update_router_expert_bias (finalize_model_grads, once per
// global batch): counts (rows, E) are summed over tp_dp_cp_group, then each
// bias (rows, E) moves by rate · sign(mean_e(counts) − counts[e]) (experts
// with fewer tokens than average go up). counts are reset to 0. rows: the
// MoE layers of this pipeline stage, stacked (one collective).
void expert_bias_update(float* expert_bias, float* counts, int64_t rows, int64_t num_experts, double rate,
                        parallel::Comm& tp_dp_cp_group);

}  // namespace mtrain::moe
