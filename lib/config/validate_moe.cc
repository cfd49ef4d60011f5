// Validation of the MoE layer flags (the router's own checks are
// validate_moe_router.cc), with Megatron-LM / Megatron-core's messages where
// they have one. Runs after check_parallel (it reads TP and sequence parallel).
#include <fmt/format.h>

#include "common/errors.h"
#include "config/flags.h"
#include "config/moe_layer_freq.h"
#include "config/validate_parts.h"

namespace mtrain::config::detail {

namespace {

// Layer flags mean nothing in a dense model: refuse them instead of ignoring them.
void refuse_without_experts(const Args& a) {
  if (a.moe_ffn_hidden_size)
    throw ConfigError(
        "moe_ffn_hidden_size is set but num_moe_experts is None. Please set num_moe_experts or remove "
        "moe_ffn_hidden_size.",
        "add --num_experts N, or drop --moe_ffn_hidden_size");
  for (const char* name :
       {"moe_layer_freq", "moe_shared_expert_intermediate_size", "moe_shared_expert_gate", "moe_grouped_gemm",
        "moe_permute_fusion", "moe_token_dispatcher_type", "expert_tensor_parallel_size"}) {
    const FlagSpec& spec = *find_flag(name)->spec;
    if (!flag_has_default_value(spec, a))
      throw ConfigError(fmt::format("--{} applies only to an MoE model, but --num_experts is not set", name),
                        "add --num_experts N, or drop the flag");
  }
  if (a.expert_model_parallel_size > 1)
    throw ConfigError("num_experts must be non None to use expert model parallelism",
                      "add --num_experts N, or use --expert_model_parallel_size 1");
}

void check_shared_expert(const Args& a) {
  if (!a.moe_shared_expert_intermediate_size) {
    if (a.moe_shared_expert_gate)
      throw ConfigError("--moe_shared_expert_gate needs a shared expert",
                        "set --moe_shared_expert_intermediate_size (the gate only scales the shared expert)");
    return;
  }
  const int size = *a.moe_shared_expert_intermediate_size;
  if (size <= 0)
    throw ConfigError(
        fmt::format("moe_shared_expert_intermediate_size must be num_shared_experts * "
                    "ffn_size_of_each_shared_expert, but got {}",
                    size));
  if (a.add_bias_linear)
    throw ConfigError("bias is not supported in the shared experts, please set '--disable-bias-linear' instead.",
                      "add --disable_bias_linear (or --add_bias_linear false)");
  if (size % a.tensor_model_parallel_size != 0)
    throw ConfigError(fmt::format("moe_shared_expert_intermediate_size ({}) must be divisible by "
                                  "tensor_model_parallel_size ({})",
                                  size, a.tensor_model_parallel_size),
                      "the shared expert is split over TP like the dense MLP");
}

void check_expert_parallel(const Args& a) {
  const int E = *a.num_experts, ep = a.expert_model_parallel_size, etp = a.expert_tensor_parallel_size;
  const int tp = a.tensor_model_parallel_size;
  require_positive(etp, "expert_tensor_parallel_size");
  if (E % ep != 0)
    throw ConfigError("Number of experts should be a multiple of expert model parallel_size.",
                      fmt::format("--num_experts {} over --expert_model_parallel_size {}", E, ep));
  if (*a.moe_ffn_hidden_size % etp != 0)
    throw ConfigError(fmt::format("moe_ffn_hidden_size ({}) must be divisible by expert_tensor_parallel_size ({})",
                                  *a.moe_ffn_hidden_size, etp),
                      "each expert's MLP is split evenly over the expert tensor-parallel ranks");
  // MoE under TP without sequence parallelism: refused by check_moe_router (Megatron's MoELayer message).
  // The experts' TP group is the dense TP group (ETP = TP) or none (ETP 1): an
  // ETP of its own would need a third split of the ranks.
  if (etp != 1 && etp != tp)
    throw ConfigError(fmt::format("--expert_tensor_parallel_size {} with tensor_model_parallel_size {}: the experts "
                                  "run whole (ETP 1) or on the TP group (ETP = TP)",
                                  etp, tp),
                      fmt::format("use --expert_tensor_parallel_size 1 (experts replicated over TP) or {} (split "
                                  "like the dense MLP)",
                                  tp));
}

// LoRA on the routed experts under the layouts neither the LoRA-on-MoE work
// nor its tests covered: the experts' adapter rows (and their dropout ids and
// mask streams) are only carried through ETP alone, EP alone (alltoall) and
// one device, so the rest is refused instead of trained unverified.
void check_moe_lora(const Args& a) {
  if (a.train_type != "lora") return;
  const int ep = a.expert_model_parallel_size, etp = a.expert_tensor_parallel_size;
  if (ep > 1 && etp > 1)
    throw ConfigError(fmt::format("--train_type lora on an MoE model with --expert_model_parallel_size {} and "
                                  "--expert_tensor_parallel_size {}: LoRA on experts split over EP and ETP at once "
                                  "is not implemented yet",
                                  ep, etp),
                      "use --expert_tensor_parallel_size 1 with EP, or --expert_model_parallel_size 1 with ETP");
  if (a.moe_token_dispatcher_type == "allgather" && ep * etp > 1)
    throw ConfigError(
        "--train_type lora on an MoE model with --moe_token_dispatcher_type allgather under expert "
        "or expert-tensor parallelism: LoRA on the allgather dispatcher's experts is not implemented yet",
        "use --moe_token_dispatcher_type alltoall");
  // The expert rows' dropout ids number tokens by their sequence position; a
  // CP rank's chunks would need TokenNumbering's chunk mapping.
  if (a.context_parallel_size > 1 && a.lora_dropout > 0.f)
    throw ConfigError(fmt::format("--lora_dropout {} on an MoE model with --context_parallel_size {}: LoRA dropout "
                                  "on the experts' rows under context parallelism is not implemented yet",
                                  a.lora_dropout, a.context_parallel_size),
                      "use --lora_dropout 0 or --context_parallel_size 1");
}

// The allgather dispatcher gathers equal token counts over its TP x EP
// group (Megatron's all-gather into one tensor); its EP ranks train
// different data-parallel micro-batches, which in SFT are as long as their
// samples: the gather would fail mid-run, so it is refused here.
void check_allgather_lengths(const Args& a) {
  const int ep = a.expert_model_parallel_size;
  if (a.command == "sft" && a.moe_token_dispatcher_type == "allgather" && ep > 1)
    throw ConfigError(
        fmt::format("--moe_token_dispatcher_type allgather with --expert_model_parallel_size {} in sft: the "
                    "dispatcher gathers the same number of tokens from each rank of its expert TP x EP group, whose "
                    "EP ranks hold different data-parallel micro-batches, and SFT micro-batches are as long as "
                    "their samples",
                    ep),
        "use --moe_token_dispatcher_type alltoall (each rank's rows sent with their counts), or pretrain (mtrain pt) "
        "at a fixed --seq_length");
}

}  // namespace

void check_moe(Args& a, std::vector<std::string>& warnings) {
  if (a.num_experts && *a.num_experts == 0) a.num_experts.reset();  // Megatron: 0 means no MoE
  if (!a.num_experts) {
    refuse_without_experts(a);
    return;
  }
  if (*a.num_experts < 0) throw ConfigError("num_moe_experts must be non-negative.", "--num_experts N, N >= 1");
  if (!a.moe_ffn_hidden_size) {
    a.moe_ffn_hidden_size = a.ffn_hidden_size;
    warnings.emplace_back("moe_ffn_hidden_size is not set, using ffn_hidden_size for MoE instead.");
  }
  require_positive(*a.moe_ffn_hidden_size, "moe_ffn_hidden_size");
  moe_layer_pattern(a.moe_layer_freq, a.num_layers);  // throws on a bad pattern
  if (a.moe_token_dispatcher_type == "flex")
    throw ConfigError(
        "--moe_token_dispatcher_type flex: the flex dispatcher (DeepEP / HybridEP kernels) does not "
        "exist on the simulated NPU",
        "use --moe_token_dispatcher_type alltoall or allgather");
  check_shared_expert(a);
  check_expert_parallel(a);
  check_moe_lora(a);
  check_allgather_lengths(a);
}

}  // namespace mtrain::config::detail
