// Internal to lib/config: the pieces validate() is made of.
#pragma once

#include <string>
#include <vector>

#include "config/args.h"

namespace mtrain::config::detail {

void check_parallel(Args& a, int world_size, std::vector<std::string>& warnings);
// --context_parallel_size > 1: algorithm, sequence length, heads, kernels (validate_context.cc).
void check_context_parallel(const Args& a);
void check_training(Args& a, std::vector<std::string>& warnings);
// --train_type lora: ranges, names, and the LoRA learning-rate default (before check_training).
void check_lora(Args& a);
// --num_experts: the MoE layer's flags (after check_parallel); derives moe_ffn_hidden_size.
void check_moe(Args& a, std::vector<std::string>& warnings);
// MoE router flags: refused without --num_experts, else check_moe_router_settings.
void check_moe_router(Args& a);
// Megatron's checks and messages on the router flags; refuses what is not implemented.
void check_moe_router_settings(Args& a);
// Derives lr_decay_iters from train_iters and checks warmup/WSD lengths against it.
void check_schedule_lengths(Args& a);

// ConfigError "--<flag> must be >= 1, got <v>" unless value >= 1.
void require_positive(int value, const char* flag);
// ConfigError unless lo <= value < hi (or <= hi).
void require_range(double value, double lo, double hi, bool hi_inclusive, const char* flag);

}  // namespace mtrain::config::detail
