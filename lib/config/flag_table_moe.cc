// Flag table, mixture-of-experts part: the MoE layer (experts, shared
// experts, dispatcher, expert parallelism) with Megatron-core's names and
// Megatron-SWIFT's defaults. The router's flags are flag_table_moe_router.cc.
#include "config/flag_table_parts.h"

namespace mtrain::config::detail {

namespace {
constexpr auto M = FlagGroup::kModel;
constexpr auto P = FlagGroup::kParallel;
constexpr auto F = FlagGroup::kFusions;
}  // namespace

std::vector<FlagSpec> moe_flags() {
  return {
      {.name = "num_experts",
       .field = &Args::num_experts,
       .group = M,
       .help = "Number of routed experts of each MoE layer (Megatron-core num_moe_experts); None: a dense model.",
       .aliases = {"num_moe_experts"}},
      {.name = "moe_ffn_hidden_size",
       .field = &Args::moe_ffn_hidden_size,
       .group = M,
       .help = "Hidden size of each routed expert's MLP.",
       .default_text = "ffn_hidden_size"},
      {.name = "moe_layer_freq",
       .field = &Args::moe_layer_freq,
       .group = M,
       .help = "Which layers are MoE: an integer N (layer i is MoE iff i % N == 0), or a Python-style pattern with "
               "one 0/1 per layer, e.g. \"([1]*3+[0]*1)*2\" or \"[0,1,1,1]\" (1 = MoE, 0 = dense)."},
      {.name = "moe_shared_expert_intermediate_size",
       .field = &Args::moe_shared_expert_intermediate_size,
       .group = M,
       .help = "Total hidden size of the shared experts (a dense MLP every token goes through, added to the routed "
               "output); None: no shared expert."},
      {.name = "moe_shared_expert_gate",
       .field = &Args::moe_shared_expert_gate,
       .group = M,
       .help = "Scale the shared expert's output by sigmoid(x . gate_weight) per token (Qwen2-MoE)."},
      {.name = "moe_grouped_gemm",
       .field = &Args::moe_grouped_gemm,
       .group = F,
       .help = "Run every local expert's GEMM in one grouped kernel call; false: a loop of per-expert GEMMs "
               "(Megatron's SequentialMLP). Same results."},
      {.name = "moe_permute_fusion",
       .field = &Args::moe_permute_fusion,
       .group = F,
       .help = "Permute tokens (and their routing probabilities) to the experts in one fused pass, and unpermute "
               "with the combine weights in one; false: separate gather and scale passes. Same results."},
      {.name = "overlap_moe_expert_parallel_comm",
       .field = &Args::overlap_moe_expert_parallel_comm,
       .group = P,
       .help = "Megatron-LM's overlap of the expert-parallel all-to-all with compute (not supported: refused)."},
      {.name = "moe_enable_deepep",
       .field = &Args::moe_enable_deepep,
       .group = P,
       .help = "DeepEP dispatch kernels for the flex dispatcher (not supported: refused)."},
      {.name = "moe_token_dispatcher_type",
       .field = &Args::moe_token_dispatcher_type,
       .group = P,
       .help = "How tokens reach their experts: alltoall (permute, all-to-all over EP, all-gather over expert TP) "
               "or allgather (every rank gathers all tokens of the TP x EP group). flex (DeepEP) is not supported.",
       .choices = {"alltoall", "allgather", "flex"}},
      {.name = "expert_tensor_parallel_size",
       .field = &Args::expert_tensor_parallel_size,
       .group = P,
       .help = "Tensor-parallel size inside each expert (ETP): experts split like the dense MLP over ETP ranks; "
               "1 replicates whole experts; 1 or tensor_model_parallel_size here. Megatron-LM's default is "
               "tensor_model_parallel_size.",
       .default_text = "1 (swift)"},
  };
}

}  // namespace mtrain::config::detail
