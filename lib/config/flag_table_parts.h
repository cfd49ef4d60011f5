// Internal to lib/config: the pieces flag_table() is assembled from.
#pragma once

#include <vector>

#include "config/flags.h"

namespace mtrain::config::detail {

std::vector<FlagSpec> model_flags();
std::vector<FlagSpec> parallel_flags();
std::vector<FlagSpec> fusion_flags();
std::vector<FlagSpec> training_flags();
std::vector<FlagSpec> lora_flags();  // --train_type lora
std::vector<FlagSpec> moe_flags();   // the MoE layer (experts, dispatcher)
std::vector<FlagSpec> moe_router_flags();  // MoE router (with --num_experts)
std::vector<FlagSpec> precision_flags();
std::vector<FlagSpec> data_flags();
std::vector<FlagSpec> logging_flags();
std::vector<FlagSpec> tensorboard_flags();
std::vector<FlagSpec> checkpoint_flags();
std::vector<FlagSpec> debug_flags();  // precision debugging
std::vector<FlagSpec> profile_flags();

// loss_scale: a number is Megatron's static fp16 loss scale, else swift's token weighting.
std::string set_loss_scale(const FlagSpec& spec, Args& args, const RawValue& value);

}  // namespace mtrain::config::detail
