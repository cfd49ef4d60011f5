// Flag table, MoE router part: Megatron-core's TopKRouter settings with
// Megatron's defaults. They shape the router of every MoE layer, so they
// mean something only together with --num_experts (the layer's flags).
#include "config/flag_table_parts.h"

namespace mtrain::config::detail {

namespace {
constexpr auto M = FlagGroup::kModel;
}  // namespace

std::vector<FlagSpec> moe_router_flags() {
  return {
      {.name = "moe_router_topk",
       .field = &Args::moe_router_topk,
       .group = M,
       .help = "MoE: experts each token is routed to (top-k)."},
      {.name = "moe_router_score_function",
       .field = &Args::moe_router_score_function,
       .group = M,
       .help = "MoE: router score function. sigmoid renormalises the top-k weights to sum 1 when k > 1 "
               "(sqrtsoftplus is refused).",
       .choices = {"softmax", "sigmoid", "sqrtsoftplus"}},
      {.name = "moe_router_pre_softmax",
       .field = &Args::moe_router_pre_softmax,
       .group = M,
       .help = "MoE: softmax over all experts before the top-k (default: top-k of the logits, then softmax over "
               "those k; required when k is 1)."},
      {.name = "moe_router_topk_scaling_factor",
       .field = &Args::moe_router_topk_scaling_factor,
       .group = M,
       .help = "MoE: multiply the top-k routing weights by this factor (None: no scaling)."},
      {.name = "moe_router_load_balancing_type",
       .field = &Args::moe_router_load_balancing_type,
       .group = M,
       .help = "MoE: load-balancing loss: aux_loss (Switch/GShard, per micro-batch), seq_aux_loss (per sequence, "
               "DeepSeek-V2) or none; weighted by --moe_aux_loss_coeff. sinkhorn, global_aux_loss and "
               "quantile_balancing are refused.",
       .choices = {"aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "quantile_balancing", "none"}},
      {.name = "moe_aux_loss_coeff",
       .field = &Args::moe_aux_loss_coeff,
       .group = M,
       .help = "MoE: coefficient of the load-balancing loss (0: off; 1e-2 is a common start)."},
      {.name = "moe_z_loss_coeff",
       .field = &Args::moe_z_loss_coeff,
       .group = M,
       .help = "MoE: coefficient of the router z-loss, mean logsumexp(logits)^2 (None: off; 1e-3 is a common start)."},
      {.name = "moe_router_enable_expert_bias",
       .field = &Args::moe_router_enable_expert_bias,
       .group = M,
       .help = "MoE: aux-loss-free balancing: a per-expert bias (sigmoid only) added to the scores for the "
               "selection, moved after each global batch by rate * sign(mean - count) over the tokens each expert "
               "got (summed over TP x DP x CP); an fp32 buffer saved with the model."},
      {.name = "moe_router_bias_update_rate",
       .field = &Args::moe_router_bias_update_rate,
       .group = M,
       .help = "MoE: step of the expert-bias update per global batch (--moe_router_enable_expert_bias)."},
      {.name = "moe_expert_capacity_factor",
       .field = &Args::moe_expert_capacity_factor,
       .group = M,
       .help = "MoE: expert capacity = ceil(tokens * topk / experts * factor) per rank; routings beyond it are "
               "dropped (None or negative: no dropping)."},
      {.name = "moe_token_drop_policy",
       .field = &Args::moe_token_drop_policy,
       .group = M,
       .help = "MoE: which routings an over-capacity expert drops: the lowest-probability ones (probs) or the "
               "latest in the sequence (position).",
       .choices = {"probs", "position"}},
      {.name = "moe_pad_expert_input_to_capacity",
       .field = &Args::moe_pad_expert_input_to_capacity,
       .group = M,
       .help = "MoE: pad every expert's input to the capacity (needs --moe_expert_capacity_factor)."},
      {.name = "moe_routing_imbalance",
       .field = &Args::moe_routing_imbalance,
       .group = M,
       .help = "MoE memory (mtrain): the most rows an expert receives from a rank, as a multiple of its "
               "balanced share, that the expert buffers are charged for on the device (1: balanced routing; "
               "not with --moe_expert_capacity_factor, whose capacity bounds them). A real micro-batch whose "
               "routing brings more holds the excess while it runs; the dry run's report also shows the peak if "
               "routing collapses onto one rank's experts."},
  };
}

}  // namespace mtrain::config::detail
