// The MoE layer's flags: Megatron's --moe_layer_freq forms (an integer or a
// list expression, evaluated by hand below from Python's semantics) and the
// validation messages (Megatron's wording where it has one).
#include <gtest/gtest.h>

#include "config/moe_layer_freq.h"
#include "config/validate.h"
#include "config_test_util.h"

namespace mtrain::config {
namespace {

using testing::error_of;

Args moe_demo() {
  Args a;
  a.num_layers = 4;
  a.hidden_size = 64;
  a.num_attention_heads = 4;
  a.seq_length = 32;
  a.train_iters = 10;
  a.num_experts = 4;
  return a;
}

std::string fails(Args a, int world_size = 1) {
  return error_of([&] { validate(a, world_size); }, ExitCode::kConfig);
}

TEST(MoeLayerFreq, IntegerAndPatterns) {
  // Megatron: layer i is MoE iff i % N == 0.
  EXPECT_EQ(moe_layer_pattern("1", 4), (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(moe_layer_pattern("2", 5), (std::vector<int>{1, 0, 1, 0, 1}));
  EXPECT_EQ(moe_layer_pattern("3", 4), (std::vector<int>{1, 0, 0, 1}));
  // Python: ([1]*3+[0]*1)*2 == [1,1,1,0,1,1,1,0]; [0]+[1]*3 == [0,1,1,1]; 2*[0,1] == [0,1,0,1].
  EXPECT_EQ(moe_layer_pattern("([1]*3+[0]*1)*2", 8), (std::vector<int>{1, 1, 1, 0, 1, 1, 1, 0}));
  EXPECT_EQ(moe_layer_pattern("[0]+[1]*3", 4), (std::vector<int>{0, 1, 1, 1}));
  EXPECT_EQ(moe_layer_pattern("([0]+[1]*3)", 4), (std::vector<int>{0, 1, 1, 1}));
  EXPECT_EQ(moe_layer_pattern("2*[0,1]", 4), (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(moe_layer_pattern("[1,0,1,1]", 4), (std::vector<int>{1, 0, 1, 1}));
}

TEST(MoeLayerFreq, BadPatternsNameTheFlag) {
  auto msg = [](const std::string& f, int n) { return error_of([&] { moe_layer_pattern(f, n); }, ExitCode::kConfig); };
  EXPECT_EQ(msg("[1]*3", 4), "Invalid length of moe_layer_pattern: 3, expected 4, current moe layer pattern: [1]*3");
  EXPECT_EQ(msg("[1,a]", 2), "Invalid pattern: [1,a]");
  EXPECT_EQ(msg("[2,1]", 2), "--moe_layer_freq [2,1]: pattern values must be 0 (dense) or 1 (MoE), got 2");
  EXPECT_EQ(msg("0", 2), "--moe_layer_freq 0: expected an integer >= 1 or a list pattern");
  EXPECT_EQ(msg("([1]*2", 2), "Invalid pattern: ([1]*2 (expected ')' at character 7)");
}

TEST(ValidateMoe, DerivedDefaultsAndWarning) {
  Args a = moe_demo();
  const std::vector<std::string> warnings = validate(a, 1);
  EXPECT_EQ(a.moe_ffn_hidden_size, a.ffn_hidden_size);
  EXPECT_NE(std::find(warnings.begin(), warnings.end(),
                      "moe_ffn_hidden_size is not set, using ffn_hidden_size for MoE instead."),
            warnings.end());
  Args zero = moe_demo();
  zero.num_experts = 0;  // Megatron: 0 means no MoE
  validate(zero, 1);
  EXPECT_FALSE(zero.num_experts);
}

TEST(ValidateMoe, Messages) {
  Args ffn = moe_demo();
  ffn.num_experts.reset();
  ffn.moe_ffn_hidden_size = 32;
  EXPECT_EQ(fails(ffn),
            "moe_ffn_hidden_size is set but num_moe_experts is None. Please set num_moe_experts or remove "
            "moe_ffn_hidden_size.");
  Args gate = moe_demo();
  gate.num_experts.reset();
  gate.moe_shared_expert_gate = true;
  EXPECT_EQ(fails(gate), "--moe_shared_expert_gate applies only to an MoE model, but --num_experts is not set");
  Args shared = moe_demo();
  shared.moe_shared_expert_intermediate_size = -4;
  EXPECT_EQ(fails(shared),
            "moe_shared_expert_intermediate_size must be num_shared_experts * ffn_size_of_each_shared_expert, but "
            "got -4");
  Args bias = moe_demo();
  bias.moe_shared_expert_intermediate_size = 64;
  bias.add_bias_linear = true;
  EXPECT_EQ(fails(bias), "bias is not supported in the shared experts, please set '--disable-bias-linear' instead.");
  Args flex = moe_demo();
  flex.moe_token_dispatcher_type = "flex";
  EXPECT_EQ(fails(flex),
            "--moe_token_dispatcher_type flex: the flex dispatcher (DeepEP / HybridEP kernels) does not exist on the "
            "simulated NPU");
  Args tp = moe_demo();
  tp.tensor_model_parallel_size = 2;
  EXPECT_EQ(fails(tp, 2),
            "During training, performance may degrade if MoE and tensor parallelism are enabled without also "
            "enabling sequence parallelism.");
  Args lora = moe_demo();
  lora.train_type = "lora";
  EXPECT_NO_THROW(validate(lora, 1)) << "LoRA on an MoE model trains";
  Args pattern = moe_demo();
  pattern.moe_layer_freq = "[1,0]";
  EXPECT_EQ(fails(pattern), "Invalid length of moe_layer_pattern: 2, expected 4, current moe layer pattern: [1,0]");
  Args etp = moe_demo();
  etp.expert_tensor_parallel_size = 2;
  EXPECT_EQ(fails(etp),
            "--expert_tensor_parallel_size 2 with tensor_model_parallel_size 1: the experts run whole (ETP 1) or on "
            "the TP group (ETP = TP)");
  Args etp_tp = moe_demo();  // ETP = TP: experts split like the dense MLP
  etp_tp.tensor_model_parallel_size = 2;
  etp_tp.sequence_parallel = true;
  etp_tp.expert_tensor_parallel_size = 2;
  validate(etp_tp, 2);
  etp_tp.moe_token_dispatcher_type = "allgather";  // Megatron's MoEAllGatherTokenDispatcher over the TP group
  validate(etp_tp, 2);
  Args dense_etp = moe_demo();
  dense_etp.num_experts.reset();
  dense_etp.expert_tensor_parallel_size = 2;
  EXPECT_EQ(fails(dense_etp),
            "--expert_tensor_parallel_size applies only to an MoE model, but --num_experts is not set");
}

TEST(ValidateMoe, ExpertParallelMessages) {
  Args ep = moe_demo();
  ep.num_experts = 3;
  ep.expert_model_parallel_size = 2;
  EXPECT_EQ(fails(ep, 2), "Number of experts should be a multiple of expert model parallel_size.");
  Args none = moe_demo();
  none.num_experts.reset();
  none.expert_model_parallel_size = 2;
  EXPECT_EQ(fails(none, 2), "num_experts must be non None to use expert model parallelism");
  Args ok = moe_demo();  // 4 experts over EP 2 at world 2 (the dense model's DP 2)
  ok.expert_model_parallel_size = 2;
  EXPECT_NO_THROW(validate(ok, 2));
  Args etp = moe_demo();  // EP x ETP: experts split over the TP group of each EP rank
  etp.tensor_model_parallel_size = 2;
  etp.sequence_parallel = true;
  etp.expert_model_parallel_size = 2;
  etp.expert_tensor_parallel_size = 2;
  EXPECT_NO_THROW(validate(etp, 4));
  Args own = moe_demo();  // an expert-TP group of its own (ETP 2 at TP 1) is refused by name
  own.expert_model_parallel_size = 2;
  own.expert_tensor_parallel_size = 2;
  EXPECT_EQ(fails(own, 4),
            "--expert_tensor_parallel_size 2 with tensor_model_parallel_size 1: the experts run whole (ETP 1) or on "
            "the TP group (ETP = TP)");
}

TEST(ValidateMoe, ContextParallelIsAccepted) {
  // The routers reduce over TP x CP (test_mtrain_moe_cp.cc proves the runs equal one device's).
  Args cp = moe_demo();
  cp.context_parallel_size = 2;
  EXPECT_NO_THROW(validate(cp, 2));
}

TEST(ValidateMoe, FlagsParseWithAliases) {
  const Args a = testing::parse_sft({"--num_moe_experts", "8", "--moe_layer_freq", "([0]+[1]*3)", "--moe_grouped_gemm",
                                     "false", "--moe_shared_expert_intermediate_size", "64", "--moe_shared_expert_gate",
                                     "--moe-token-dispatcher-type", "allgather"});
  EXPECT_EQ(a.num_experts, 8);
  EXPECT_EQ(a.moe_layer_freq, "([0]+[1]*3)");
  EXPECT_FALSE(a.moe_grouped_gemm);
  EXPECT_EQ(a.moe_shared_expert_intermediate_size, 64);
  EXPECT_TRUE(a.moe_shared_expert_gate);
  EXPECT_EQ(a.moe_token_dispatcher_type, "allgather");
}

// LoRA on the experts only where its rows (and dropout ids) are carried:
// EP x ETP, the allgather dispatcher under EP/ETP and LoRA dropout under CP
// are refused by name before training; EP alone and ETP alone train.
TEST(ValidateMoe, LoraOnExpertsRefusesUncheckedLayoutsByName) {
  Args grid = moe_demo();
  grid.train_type = "lora";
  grid.tensor_model_parallel_size = 2;
  grid.sequence_parallel = true;
  grid.expert_model_parallel_size = 2;
  grid.expert_tensor_parallel_size = 2;
  EXPECT_EQ(fails(grid, 4),
            "--train_type lora on an MoE model with --expert_model_parallel_size 2 and --expert_tensor_parallel_size "
            "2: LoRA on experts split over EP and ETP at once is not implemented yet");
  grid.expert_tensor_parallel_size = 1;
  EXPECT_NO_THROW(validate(grid, 4)) << "EP with whole experts";
  const std::string allgather =
      "--train_type lora on an MoE model with --moe_token_dispatcher_type allgather under expert or "
      "expert-tensor parallelism: LoRA on the allgather dispatcher's experts is not implemented yet";
  grid.moe_token_dispatcher_type = "allgather";
  EXPECT_EQ(fails(grid, 4), allgather) << "EP alone";
  grid.expert_model_parallel_size = 1;
  grid.expert_tensor_parallel_size = 2;
  EXPECT_EQ(fails(grid, 2), allgather) << "ETP alone";
  grid.moe_token_dispatcher_type = "alltoall";
  EXPECT_NO_THROW(validate(grid, 2)) << "ETP = TP alone";
  Args cp = moe_demo();
  cp.train_type = "lora";
  cp.context_parallel_size = 2;
  EXPECT_EQ(fails(cp, 2),
            "--lora_dropout 0.05 on an MoE model with --context_parallel_size 2: LoRA dropout on the experts' rows "
            "under context parallelism is not implemented yet");
}

// --moe_routing_imbalance (mtrain's, what the expert buffers are planned
// for): at least 1, MoE only, not beside a capacity (which bounds the rows).
TEST(ValidateMoe, RoutingImbalanceIsAnAllowanceOverBalanced) {
  Args a = moe_demo();
  a.moe_routing_imbalance = 0.5;
  EXPECT_EQ(fails(a), "--moe_routing_imbalance must be >= 1, got 0.5");
  a.moe_routing_imbalance = 1.5;
  EXPECT_NO_THROW(validate(a, 1));
  a.moe_expert_capacity_factor = 1.25;
  EXPECT_EQ(fails(a),
            "--moe_routing_imbalance has no effect with --moe_expert_capacity_factor: the expert buffers are planned "
            "for the capacity, which no expert exceeds");
  Args dense = moe_demo();
  dense.num_experts.reset();
  dense.moe_routing_imbalance = 2;
  EXPECT_EQ(fails(dense), "--moe_routing_imbalance applies only to MoE models, but --num_experts is not set");
}

// The allgather dispatcher's equal-count gather over EP ranks of different
// data-parallel micro-batches: refused in sft (samples' own lengths), not in pt.
TEST(ValidateMoe, AllgatherOverEpNeedsEqualLengths) {
  Args a = moe_demo();
  a.moe_token_dispatcher_type = "allgather";
  a.expert_model_parallel_size = 2;
  EXPECT_EQ(fails(a, 2),
            "--moe_token_dispatcher_type allgather with --expert_model_parallel_size 2 in sft: the dispatcher gathers "
            "the same number of tokens from each rank of its expert TP x EP group, whose EP ranks hold different "
            "data-parallel micro-batches, and SFT micro-batches are as long as their samples");
  a.command = "pt";
  EXPECT_NO_THROW(validate(a, 2));
}

}  // namespace
}  // namespace mtrain::config
