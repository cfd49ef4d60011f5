// Validation of the MoE router flags: Megatron's checks with Megatron's
// messages (TransformerConfig.__post_init__), then what mtrain refuses by
// name. topk <= num_experts is checked where the layer's expert count is
// known (moe::router_config_from_args, when the model is built).
#include <fmt/format.h>

#include <string>

#include "common/errors.h"
#include "config/flags.h"
#include "config/validate_parts.h"

namespace mtrain::config::detail {

namespace {

const char* const kRouterFlags[] = {"moe_router_topk",
                                    "moe_router_score_function",
                                    "moe_router_pre_softmax",
                                    "moe_router_topk_scaling_factor",
                                    "moe_router_load_balancing_type",
                                    "moe_aux_loss_coeff",
                                    "moe_z_loss_coeff",
                                    "moe_router_enable_expert_bias",
                                    "moe_router_bias_update_rate",
                                    "moe_expert_capacity_factor",
                                    "moe_token_drop_policy",
                                    "moe_pad_expert_input_to_capacity",
                                    "moe_routing_imbalance"};

// Router flags shape MoE layers only: without --num_experts there is no
// router, so a changed router flag would be ignored — refuse it instead.
// (Looked up by name: --num_experts belongs to the MoE layer's flag table.)
bool has_experts(const Args& a) {
  const auto experts = find_flag("num_experts");
  return experts && !flag_has_default_value(*experts->spec, a);
}

void refuse_without_experts(const Args& a) {
  const auto experts = find_flag("num_experts");
  for (const char* name : kRouterFlags) {
    if (flag_has_default_value(*find_flag(name)->spec, a)) continue;
    throw ConfigError(fmt::format("--{} applies only to MoE models, but --num_experts is not set", name),
                      experts ? "set --num_experts (and the other MoE layer flags), or drop the flag"
                              : "MoE layers are not available in this build yet; drop the flag");
  }
}

void require_non_negative(double value, const char* flag) {
  if (!(value >= 0)) throw ConfigError(fmt::format("--{} must be >= 0, got {}", flag, value));
}

// Megatron's own checks, in its order and words.
void check_megatron_rules(Args& a) {
  const std::string& lb = a.moe_router_load_balancing_type;
  if (a.moe_expert_capacity_factor && *a.moe_expert_capacity_factor < 0) a.moe_expert_capacity_factor.reset();
  if (a.moe_expert_capacity_factor && lb != "aux_loss" && lb != "seq_aux_loss" && lb != "global_aux_loss" &&
      lb != "none")
    throw ConfigError(
        "moe_expert_capacity_factor only works with aux_loss, seq_aux_loss, global_aux_loss or none "
        "load balancing",
        "use --moe_router_load_balancing_type aux_loss, seq_aux_loss or none, or drop "
        "--moe_expert_capacity_factor");
  if (a.moe_pad_expert_input_to_capacity && !a.moe_expert_capacity_factor)
    throw ConfigError("moe_expert_capacity_factor must be set to use moe_pad_expert_input_to_capacity",
                      "add --moe_expert_capacity_factor, or drop --moe_pad_expert_input_to_capacity");
  if (a.moe_router_enable_expert_bias && a.moe_router_score_function != "sigmoid" &&
      a.moe_router_score_function != "sqrtsoftplus")
    throw ConfigError(
        "Expert bias for aux-loss-free routing only supports 'sigmoid' and 'sqrtsoftplus' score "
        "functions.",
        "set --moe_router_score_function sigmoid, or unset --moe_router_enable_expert_bias");
  if (a.moe_router_topk == 1 && a.moe_router_score_function == "softmax" && !a.moe_router_pre_softmax &&
      lb != "sinkhorn")
    throw ConfigError("Please use --moe-router-pre-softmax when topk is 1.",
                      "softmax over a single selected logit is always 1 and has no gradient: add "
                      "--moe_router_pre_softmax");
}

// Megatron settings mtrain does not implement: refused by name.
void refuse_unimplemented(const Args& a) {
  if (a.moe_router_score_function == "sqrtsoftplus")
    throw ConfigError("--moe_router_score_function sqrtsoftplus is not supported",
                      "use --moe_router_score_function softmax or sigmoid");
  // A LoRA checkpoint holds the trainable tensors only: the moving bias would not be saved.
  if (a.moe_router_enable_expert_bias && a.train_type == "lora")
    throw ConfigError(
        "--moe_router_enable_expert_bias with --train_type lora is not supported: a LoRA checkpoint "
        "would not hold the router's moving expert_bias",
        "train in full (--train_type full), or balance with --moe_aux_loss_coeff");
  const std::string& lb = a.moe_router_load_balancing_type;
  if (lb == "sinkhorn" || lb == "global_aux_loss" || lb == "quantile_balancing")
    throw ConfigError(fmt::format("--moe_router_load_balancing_type {} is not supported", lb),
                      "use aux_loss, seq_aux_loss or none (or --moe_router_enable_expert_bias with sigmoid "
                      "scores for aux-loss-free balancing)");
}

}  // namespace

void check_moe_router(Args& a) {
  if (!has_experts(a)) {
    refuse_without_experts(a);
    return;
  }
  check_moe_router_settings(a);
}

void check_moe_router_settings(Args& a) {
  // Megatron's MoELayer refuses this in training: every TP rank would route
  // the same tokens, and the token group's shares would count them TP times.
  if (a.tensor_model_parallel_size > 1 && !a.sequence_parallel)
    throw ConfigError(
        "During training, performance may degrade if MoE and tensor parallelism are enabled without "
        "also enabling sequence parallelism.",
        "add --sequence_parallel");
  require_positive(a.moe_router_topk, "moe_router_topk");
  require_non_negative(a.moe_aux_loss_coeff, "moe_aux_loss_coeff");
  if (a.moe_z_loss_coeff) require_non_negative(*a.moe_z_loss_coeff, "moe_z_loss_coeff");
  if (a.moe_router_topk_scaling_factor)
    require_non_negative(*a.moe_router_topk_scaling_factor, "moe_router_topk_scaling_factor");
  require_non_negative(a.moe_router_bias_update_rate, "moe_router_bias_update_rate");
  if (!(a.moe_routing_imbalance >= 1.0))
    throw ConfigError(fmt::format("--moe_routing_imbalance must be >= 1, got {}", a.moe_routing_imbalance),
                      "it is the most rows an expert receives as a multiple of its balanced share: 1 plans for "
                      "balanced routing");
  check_megatron_rules(a);
  // With a capacity the expert buffers are planned for it (no expert takes more).
  if (a.moe_expert_capacity_factor && a.moe_routing_imbalance != 1.0)
    throw ConfigError(
        "--moe_routing_imbalance has no effect with --moe_expert_capacity_factor: the expert buffers are planned "
        "for the capacity, which no expert exceeds",
        "drop --moe_routing_imbalance, or drop --moe_expert_capacity_factor to plan for an allowance instead");
  refuse_unimplemented(a);
}

}  // namespace mtrain::config::detail
