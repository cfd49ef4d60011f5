// Megatron's weight + optimizer formula for an MoE model (plan/formula_compare.h)
// against Megatron-LM's own unit-test anchor
// (tests/unit_tests/training/test_weight_and_optimizer_memory.py @d98e8a64,
// estimator-formulas.md §1b): 3195 bytes on the most loaded shard.
#include <gtest/gtest.h>

#include "plan/formula_compare.h"

namespace mtrain::plan {
namespace {

TEST(MoeFormula, MegatronUnitTestAnchor) {
  // h=8, ffn=16, kv_channels=4, a=2, L=2, V=32, RMSNorm, no SwiGLU,
  // moe_layer_freq=[0,1], E=4, top-1, moe ffn 16, shared 8, TP=2, EP=2, ETP=4,
  // distributed optimizer, p=2, world 64 (d=16, EDP=4): 388 * 6.75 + 64 * 9.
  config::Args a;
  a.hidden_size = 8;
  a.ffn_hidden_size = 16;
  a.kv_channels = 4;
  a.num_attention_heads = 2;
  a.num_query_groups = 2;
  a.num_layers = 2;
  a.vocab_size = 32;
  a.make_vocab_size_divisible_by = 16;  // 16 x TP 2 = 32: no padding, as the test's vocabulary
  a.normalization = "RMSNorm";
  a.swiglu = false;
  a.untie_embeddings_and_output_weights = false;
  a.moe_layer_freq = "[0,1]";
  a.num_experts = 4;
  a.moe_router_topk = 1;
  a.moe_ffn_hidden_size = 16;
  a.moe_shared_expert_intermediate_size = 8;
  a.tensor_model_parallel_size = 2;
  a.expert_model_parallel_size = 2;
  a.expert_tensor_parallel_size = 4;
  a.use_distributed_optimizer = true;
  a.pipeline_model_parallel_size = 2;
  a.world_size = 64;
  a.data_parallel_size = 16;
  EXPECT_DOUBLE_EQ(megatron_formulas(a).states, 388 * 6.75 + 64 * 9);
}

}  // namespace
}  // namespace mtrain::plan
