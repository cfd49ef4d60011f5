// Every FLOP of a training step is inside a kernel region the cost model
// prices: the GEMM and attention kernels a dry step records, summed over the
// world, equal Megatron's num_floating_point_operations (model/flops.h;
// estimator-formulas.md §1d: fwd + bwd, no recompute, causal attention not
// halved), for a dense GQA SwiGLU model and a GPT-style one, at one device and
// at TP 2 x PP 2. Unfused attention, whose backward is two GEMMs per forward
// one as the formula assumes (flash recomputes the scores: 5 GEMMs to 2).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "model/flops.h"
#include "plan/dry_run.h"
#include "plan/dry_run_fixture.h"

namespace mtrain::plan {
namespace {

class StepFlops : public DryRunTest {
 protected:
  std::string job(const std::string& preset, const std::string& extra) const {
    return "pt --model_preset " + preset +
           " --vocab_size 1024 --train_iters 1 --lr_warmup_iters 0 --global_batch_size 4 --micro_batch_size 1 "
           "--recompute_granularity none --attention_backend unfused --output_dir " +
           out_.string() + " " + extra;
  }
  // The recorded matrix work (GEMMs and attention) of every rank, by its class's rank count.
  static double world_matrix_flops(const DryRun& r) {
    double sum = 0;
    for (const ClassMemory& c : r.classes) {
      double mine = 0;
      for (const KernelRecord& k : observe::expanded(c.step).kernels)
        if (k.work.kind != KernelKind::kMemory) mine += k.work.flops;
      sum += mine * static_cast<double>(c.rank_class.ranks.size());
    }
    return sum;
  }
};

TEST_F(StepFlops, RecordedMatrixFlopsAreMegatronsCount) {
  for (const std::string preset : {"demo", "gpt2-124m"}) {
    for (const auto& [layout, world] : std::vector<std::pair<std::string, int>>{
             {"", 1}, {"--tensor_model_parallel_size 2 --pipeline_model_parallel_size 2", 4}}) {
      const DryRun r = dry_run(parse(job(preset, layout), world));
      const double expected = model::megatron_flops_per_iteration(r.whole_model, r.global_batch, r.seq_length);
      EXPECT_NEAR(world_matrix_flops(r), expected, 1e-9 * expected) << preset << " " << layout;
    }
  }
}

// LoRA (all-linear targets, the base frozen): a real run computes no
// weight gradient of a frozen linear, so neither does the dry run. Its matrix
// work is Megatron's count minus the frozen weight-gradient GEMMs (2 x tokens
// x the weights of qkv, proj, fc1, fc2 and the output layer: the third of
// their fwd + bwd 6 x tokens x weights) plus each adapter's own GEMMs (down
// C_in -> r, up r -> C_out: forward 2 x tokens x r (C_in + C_out), the
// backward twice that). Under TP t the adapter's unsplit half is whole on
// every TP rank, as on Megatron's parallel linears (A of a column-parallel
// linear, B of a row-parallel one): its GEMMs run t times over the world.
// Re-derived here from the model's shape, at one device and at TP 2 x PP 2.
TEST_F(StepFlops, LoraRunsNoFrozenWeightGradientGemm) {
  for (const auto& [layout, world, t] : std::vector<std::tuple<std::string, int, double>>{
           {"", 1, 1}, {"--tensor_model_parallel_size 2 --pipeline_model_parallel_size 2", 4, 2}}) {
    const DryRun full = dry_run(parse(job("demo", layout), world));
    const DryRun lora = dry_run(parse(job("demo", layout + " --train_type lora --lora_rank 8"), world));
    const model::ModelConfig& m = lora.whole_model;
    const double tokens = static_cast<double>(lora.global_batch) * static_cast<double>(lora.seq_length);
    const double C = m.hidden, F = m.ffn, q = m.heads * m.head_dim, kv = 2.0 * m.groups * m.head_dim, r = 8;
    const double fc1_out = (m.swiglu ? 2 : 1) * F;
    const double layer_weights = C * (q + kv) + q * C + C * fc1_out + F * C;
    const double frozen_wgrad = 2 * tokens * (m.num_layers * layer_weights + static_cast<double>(m.padded_vocab) * C);
    // C_in + C_out per site, the replicated half t times: qkv and fc1 column-parallel, proj and fc2 row-parallel.
    const double adapter_io = (t * C + (q + kv)) + (q + t * C) + (t * C + fc1_out) + (F + t * C);
    const double adapters = 3 * 2 * tokens * r * adapter_io * m.num_layers;
    const double megatron = model::megatron_flops_per_iteration(full.whole_model, full.global_batch, full.seq_length);
    EXPECT_NEAR(world_matrix_flops(full), megatron, 1e-9 * megatron) << layout;
    const double expected = megatron - frozen_wgrad + adapters;
    EXPECT_NEAR(world_matrix_flops(lora), expected, 1e-9 * expected) << layout;
    for (const ClassMemory& c : lora.classes)
      for (const KernelRecord& k : observe::expanded(c.step).kernels)
        EXPECT_NE(k.name, "linear_backward_dweight") << layout;
  }
}

// MindSpeed's general mask: every ring step computes its whole block (no
// causal skip), so the ring's forward block kernels over the world hold the
// whole s x s score matrix of every head, layer and sequence once: 2 GEMMs
// of 2 s^2 D FLOPs per head (QK^T and PV). With the causal mask a rank runs
// 5 of the 8 chunk pairs at CP 2 (the hidden ones skipped), the diagonals
// marked causal. Each block's softmax update is a kernel of its own either way.
TEST_F(StepFlops, RingGeneralMaskComputesWholeBlocks) {
  const std::string cp = " --attention_backend flash --context_parallel_size 2";
  const DryRun general = dry_run(parse(job("demo", cp + " --cp_attention_mask_type general"), 2));
  const DryRun causal = dry_run(parse(job("demo", cp), 2));
  const model::ModelConfig& m = general.whole_model;
  const double s = static_cast<double>(general.seq_length);
  const double whole =
      static_cast<double>(general.global_batch) * m.num_layers * m.heads * 2 * (2 * s * s * m.head_dim);
  auto blocks = [](const DryRun& r, bool* any_causal, int* merges) {
    double flops = 0;
    int n = 0;
    for (const ClassMemory& c : r.classes)
      for (const KernelRecord& k : observe::expanded(c.step).kernels) {
        const double ranks = static_cast<double>(c.rank_class.ranks.size());
        if (k.name == "attention_flash_block_forward") {
          flops += k.work.flops * ranks;
          *any_causal |= k.work.causal;
          ++n;
        }
        if (k.name == "attention_lse_merge") --n;
      }
    *merges = n;  // forward blocks minus merges: 0 when each block has its update
    return flops;
  };
  bool general_causal = false, causal_causal = false;
  int general_unmerged = 0, causal_unmerged = 0;
  EXPECT_NEAR(blocks(general, &general_causal, &general_unmerged), whole, 1e-9 * whole);
  EXPECT_FALSE(general_causal);
  EXPECT_LT(blocks(causal, &causal_causal, &causal_unmerged), 0.7 * whole);
  EXPECT_TRUE(causal_causal);
  EXPECT_EQ(general_unmerged, 0);
  EXPECT_EQ(causal_unmerged, 0);
}

// The routed experts' GEMMs are priced by each expert's own shape: one
// region per grouped GEMM with batch = the rank's experts and the rows split
// among them, its FLOPs the rows' exact 2 M n k. demo-moe at EP 2: 4 experts
// per rank; forward, input-gradient and weight-gradient GEMMs each.
TEST_F(StepFlops, GroupedExpertGemmsArePricedPerExpert) {
  const DryRun r = dry_run(parse(job("demo-moe", "--expert_model_parallel_size 2"), 2));
  int seen = 0;
  for (const KernelRecord& k : observe::expanded(r.classes.at(0).step).kernels) {
    if (k.name.rfind("grouped_gemm_", 0) != 0 && k.name.rfind("expert_gemm_", 0) != 0) continue;
    ++seen;
    EXPECT_EQ(k.work.kind, KernelKind::kGemm) << k.name;
    EXPECT_EQ(k.work.batch, 4) << k.name;
    // The per-expert shape times the experts covers the rows (split evenly, the last share rounded up).
    const bool wgrad = k.name.find("dweight") != std::string::npos;
    EXPECT_GT(k.work.flops, 0) << k.name;
    const double per_expert = 2.0 * k.work.m * k.work.n * k.work.k;
    EXPECT_GE(per_expert * k.work.batch, k.work.flops) << k.name;
    EXPECT_LT(per_expert * (k.work.batch - 1), k.work.flops) << k.name;
    // The rows run along m, or along k for the weight gradient (dW_g (OC, C) = dout_g^T inp_g).
    const int64_t rows_dim = wgrad ? k.work.k : k.work.m;
    EXPECT_LT(rows_dim, 2.0 * k.work.flops / (2.0 * (wgrad ? k.work.m : k.work.k) * k.work.n)) << k.name;
  }
  EXPECT_GT(seen, 0);
}

// The router's routing pass, the token permutation and the shared expert's
// sigmoid gate are kernels the cost model prices, in a dry step as in a real
// one: per MoE layer and micro-batch one top-k pass over the fp32 logits (N
// tokens x E experts read, k ids and probabilities a token written) and its
// backward, the permutation and unpermutation of the N k rows and their
// backwards, and the gate's forward and two backward passes over N x C. demo-moe: 8 experts, top-2, a
// gated shared expert in every layer; micro-batch 1 of the job's sequence.
TEST_F(StepFlops, RoutingAndTheSharedExpertGateArePriced) {
  const DryRun r = dry_run(parse(job("demo-moe", ""), 1));
  const ClassMemory& c = r.classes.at(0);
  const double N = static_cast<double>(r.seq_length), E = 8, k = 2, C = r.whole_model.hidden;
  const int layers_x_mb = r.whole_model.num_layers * r.microbatches;
  std::map<std::string, int> seen;
  for (const KernelRecord& x : observe::expanded(c.step).kernels) {
    if (x.name == "router_topk") {
      EXPECT_DOUBLE_EQ(x.work.bytes, 4 * N * E + 8 * N * k);
    } else if (x.name == "router_topk_backward") {
      EXPECT_DOUBLE_EQ(x.work.bytes, 8 * N * E + 4 * N * k);
    } else if (x.name.rfind("shared_expert_gate", 0) == 0) {
      EXPECT_GT(x.work.bytes, 2 * N * C) << x.name;  // at least x and the output, 16-bit or wider
    } else if (x.name.rfind("moe_permute", 0) == 0 || x.name.rfind("moe_unpermute", 0) == 0) {
      EXPECT_GE(x.work.bytes, 2 * N * k * C) << x.name;  // the k rows of every token moved once at least
    } else {
      continue;
    }
    EXPECT_EQ(x.work.kind, KernelKind::kMemory) << x.name;
    ++seen[std::string(x.name)];
  }
  for (const char* name : {"router_topk", "router_topk_backward", "shared_expert_gate", "shared_expert_gate_backward",
                           "shared_expert_gate_input_backward", "moe_permute_backward", "moe_unpermute_backward"})
    EXPECT_EQ(seen[name], layers_x_mb) << name;
  // The token permutation and its inverse, fused or not (--moe_permute_fusion).
  EXPECT_EQ(seen["moe_permute"] + seen["moe_permute_fused"], layers_x_mb);
  EXPECT_EQ(seen["moe_unpermute"] + seen["moe_unpermute_fused"], layers_x_mb);
}

}  // namespace
}  // namespace mtrain::plan
