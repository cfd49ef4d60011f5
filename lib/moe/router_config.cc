// RouterConfig from the validated flags (config/validate_moe_router.cc).
#include <fmt/format.h>

#include "common/errors.h"
#include "config/args.h"
#include "moe/router.h"

namespace mtrain::moe {

RouterConfig router_config_from_args(const config::Args& a, int64_t num_experts) {
  // torch.topk would fail inside Megatron's first forward; say it up front.
  if (a.moe_router_topk > num_experts)
    throw ConfigError(
        fmt::format("--moe_router_topk {} is larger than --num_experts {}", a.moe_router_topk, num_experts),
        "route each token to at most num_experts experts");
  RouterConfig c;
  c.num_experts = num_experts;
  c.hidden = a.hidden_size;
  c.topk = a.moe_router_topk;
  c.score_function = a.moe_router_score_function == "sigmoid" ? ScoreFunction::kSigmoid : ScoreFunction::kSoftmax;
  c.pre_softmax = a.moe_router_pre_softmax;
  c.topk_scaling_factor = a.moe_router_topk_scaling_factor;
  c.load_balancing = a.moe_router_load_balancing_type == "seq_aux_loss" ? LoadBalancing::kSeqAuxLoss
                     : a.moe_router_load_balancing_type == "none"       ? LoadBalancing::kNone
                                                                        : LoadBalancing::kAuxLoss;
  c.aux_loss_coeff = a.moe_aux_loss_coeff;
  c.z_loss_coeff = a.moe_z_loss_coeff;
  c.enable_expert_bias = a.moe_router_enable_expert_bias;
  c.bias_update_rate = a.moe_router_bias_update_rate;
  c.capacity_factor = a.moe_expert_capacity_factor;
  c.drop_policy = a.moe_token_drop_policy == "position" ? DropPolicy::kPosition : DropPolicy::kProbs;
  c.pad_to_capacity = a.moe_pad_expert_input_to_capacity;
  return c;
}

}  // namespace mtrain::moe
