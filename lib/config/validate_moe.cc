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
  if (a.moe_token_dispatcher_type == "allgather" && etp * ep > 1)
    throw ConfigError(
        "--moe_token_dispatcher_type allgather with expert tensor or expert parallelism is not "
        "implemented yet",
        "use --moe_token_dispatcher_type alltoall (with EP = ETP = 1 both dispatchers are the same "
        "local permutation)");
  if (ep > 1 && etp > 1)
    throw ConfigError(fmt::format("--expert_tensor_parallel_size {} with --expert_model_parallel_size {} is not "
                                  "implemented yet: expert parallelism runs whole experts (ETP 1)",
                                  etp, ep),
                      "use --expert_tensor_parallel_size 1 with expert parallelism");
  if (ep == 1 && etp != 1 && etp != tp)
    throw ConfigError(fmt::format("--expert_tensor_parallel_size {} with tensor_model_parallel_size {}: without "
                                  "expert parallelism the experts run on the TP group",
                                  etp, tp),
                      fmt::format("use --expert_tensor_parallel_size 1 (experts replicated over TP) or {} (split "
                                  "like the dense MLP)",
                                  tp));
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
  // The router's token group would have to span CP (Megatron reduces the
  // load-balancing counts over TP x CP); until it does, the aux loss of a CP
  // rank's chunks differs from the single device's.
  if (a.context_parallel_size > 1)
    throw ConfigError(fmt::format("--num_experts with --context_parallel_size {}: an MoE model under context "
                                  "parallelism is not implemented yet",
                                  a.context_parallel_size),
                      "use --context_parallel_size 1 for an MoE model (expert, tensor and pipeline parallelism work)");
  check_shared_expert(a);
  check_expert_parallel(a);
}

}  // namespace mtrain::config::detail
