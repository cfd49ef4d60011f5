// The router flags: Megatron's defaults, Megatron's validation messages,
// what mtrain refuses by name, and the RouterConfig they build.
#include <gtest/gtest.h>

#include "config/config_test_util.h"
#include "config/validate_parts.h"
#include "moe/router.h"

namespace mtrain::moe {
namespace {

using config::Args;
using config::testing::config_error;
using config::testing::error_of;
using config::testing::parse_sft;
using config::testing::sft_with;

std::string settings_error(Args a) {
  return error_of([&] { config::detail::check_moe_router_settings(a); }, ExitCode::kConfig);
}

TEST(RouterFlags, MegatronDefaults) {
  const Args a = parse_sft({});
  EXPECT_EQ(a.moe_router_topk, 2);
  EXPECT_EQ(a.moe_router_score_function, "softmax");
  EXPECT_FALSE(a.moe_router_pre_softmax);
  EXPECT_FALSE(a.moe_router_topk_scaling_factor.has_value());
  EXPECT_EQ(a.moe_router_load_balancing_type, "aux_loss");
  EXPECT_EQ(a.moe_aux_loss_coeff, 0.0);
  EXPECT_FALSE(a.moe_z_loss_coeff.has_value());
  EXPECT_FALSE(a.moe_router_enable_expert_bias);
  EXPECT_EQ(a.moe_router_bias_update_rate, 1e-3);
  EXPECT_FALSE(a.moe_expert_capacity_factor.has_value());
  EXPECT_EQ(a.moe_token_drop_policy, "probs");
  EXPECT_FALSE(a.moe_pad_expert_input_to_capacity);
}

// Megatron's hyphenated spellings parse to the same settings.
TEST(RouterFlags, ParseBothSpellings) {
  Args a;
  a.moe_router_topk = 4;
  a.moe_router_score_function = "sigmoid";
  a.moe_router_enable_expert_bias = true;
  a.moe_expert_capacity_factor = 1.25;
  a.moe_token_drop_policy = "position";
  config::detail::check_moe_router_settings(a);  // a valid combination
  EXPECT_NE(config_error(sft_with({"--moe-router-topk", "4"})).find("--moe_router_topk applies only to MoE models"),
            std::string::npos);
}

// Until the MoE layer is configured (--num_experts) there is no router: a
// router flag would be ignored, so it is refused.
TEST(RouterFlags, RefusedWithoutExperts) {
  EXPECT_EQ(config_error(sft_with({"--moe_aux_loss_coeff", "0.01"})),
            "--moe_aux_loss_coeff applies only to MoE models, but --num_experts is not set");
  EXPECT_EQ(config_error(sft_with({"--moe_router_pre_softmax"})),
            "--moe_router_pre_softmax applies only to MoE models, but --num_experts is not set");
}

TEST(RouterFlags, MegatronMessages) {
  Args a;
  a.moe_router_topk = 1;
  EXPECT_EQ(settings_error(a), "Please use --moe-router-pre-softmax when topk is 1.");
  a.moe_router_pre_softmax = true;
  config::detail::check_moe_router_settings(a);

  Args bias;
  bias.moe_router_enable_expert_bias = true;
  EXPECT_EQ(settings_error(bias),
            "Expert bias for aux-loss-free routing only supports 'sigmoid' and 'sqrtsoftplus' score functions.");

  // mtrain's own refusal: a LoRA checkpoint would not hold the moving bias.
  Args lora;
  lora.moe_router_score_function = "sigmoid";
  lora.moe_router_enable_expert_bias = true;
  lora.train_type = "lora";
  EXPECT_EQ(settings_error(lora),
            "--moe_router_enable_expert_bias with --train_type lora is not supported: a LoRA checkpoint would not "
            "hold the router's moving expert_bias");

  Args pad;
  pad.moe_pad_expert_input_to_capacity = true;
  EXPECT_EQ(settings_error(pad), "moe_expert_capacity_factor must be set to use moe_pad_expert_input_to_capacity");

  Args sinkhorn;
  sinkhorn.moe_router_load_balancing_type = "sinkhorn";
  sinkhorn.moe_expert_capacity_factor = 1.0;
  EXPECT_EQ(settings_error(sinkhorn),
            "moe_expert_capacity_factor only works with aux_loss, seq_aux_loss, global_aux_loss or none load "
            "balancing");

  Args tp;
  tp.tensor_model_parallel_size = 2;
  EXPECT_EQ(settings_error(tp),
            "During training, performance may degrade if MoE and tensor parallelism are enabled without also "
            "enabling sequence parallelism.");
  tp.sequence_parallel = true;
  config::detail::check_moe_router_settings(tp);

  // A negative capacity factor means None (Megatron): padding then needs one.
  Args negative;
  negative.moe_expert_capacity_factor = -1.0;
  config::detail::check_moe_router_settings(negative);
  EXPECT_FALSE(negative.moe_expert_capacity_factor.has_value());
}

TEST(RouterFlags, UnimplementedSettingsRefusedByName) {
  for (const char* type : {"sinkhorn", "global_aux_loss", "quantile_balancing"}) {
    Args a;
    a.moe_router_load_balancing_type = type;
    EXPECT_EQ(settings_error(a), std::string("--moe_router_load_balancing_type ") + type + " is not supported");
  }
  Args s;
  s.moe_router_score_function = "sqrtsoftplus";
  EXPECT_EQ(settings_error(s), "--moe_router_score_function sqrtsoftplus is not supported");
  Args topk;
  topk.moe_router_topk = 0;
  EXPECT_EQ(settings_error(topk), "--moe_router_topk must be >= 1, got 0");
  Args coeff;
  coeff.moe_aux_loss_coeff = -0.1;
  EXPECT_EQ(settings_error(coeff), "--moe_aux_loss_coeff must be >= 0, got -0.1");
}

TEST(RouterFlags, RouterConfigFromArgs) {
  Args a;
  a.hidden_size = 64;
  a.moe_router_topk = 3;
  a.moe_router_score_function = "sigmoid";
  a.moe_router_load_balancing_type = "seq_aux_loss";
  a.moe_aux_loss_coeff = 0.01;
  a.moe_z_loss_coeff = 1e-3;
  a.moe_router_enable_expert_bias = true;
  a.moe_router_bias_update_rate = 0.02;
  a.moe_expert_capacity_factor = 1.5;
  a.moe_token_drop_policy = "position";
  a.moe_pad_expert_input_to_capacity = true;
  a.moe_router_topk_scaling_factor = 2.5;
  const RouterConfig c = router_config_from_args(a, 8);
  EXPECT_EQ(c.num_experts, 8);
  EXPECT_EQ(c.hidden, 64);
  EXPECT_EQ(c.topk, 3);
  EXPECT_EQ(c.score_function, ScoreFunction::kSigmoid);
  EXPECT_EQ(c.load_balancing, LoadBalancing::kSeqAuxLoss);
  EXPECT_EQ(c.aux_loss_coeff, 0.01);
  EXPECT_EQ(c.z_loss_coeff, 1e-3);
  EXPECT_TRUE(c.enable_expert_bias);
  EXPECT_EQ(c.bias_update_rate, 0.02);
  EXPECT_EQ(c.capacity_factor, 1.5);
  EXPECT_EQ(c.drop_policy, DropPolicy::kPosition);
  EXPECT_TRUE(c.pad_to_capacity);
  EXPECT_EQ(c.topk_scaling_factor, 2.5);
  EXPECT_EQ(error_of([&] { router_config_from_args(a, 2); }, ExitCode::kConfig),
            "--moe_router_topk 3 is larger than --num_experts 2");
}

}  // namespace
}  // namespace mtrain::moe
