// A tiny MoE GPT end to end: `mtrain pt` with --num_experts learns (the loss
// falls), prints Megatron's MoE metrics between the lm loss and the loss
// scale and writes them to logging.jsonl; the parameter count is the
// estimator formula's (estimator-formulas.md §1b, with Megatron's EP-aware
// router term h*E) computed by hand below.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

class MoeCli : public MtrainTest {
 protected:
  // Qwen3-30B-A3B (the preset: its published config.json) dry-run on 16 NPUs,
  // two nodes of 8, bf16, distributed optimizer, with `layout`'s parallel flags.
  RunResult qwen3_on_sixteen_npus(const std::string& layout) {
    RunOptions o;
    o.timeout_seconds = 120;
    o.env = {{"NNODES", "2"}, {"NPROC_PER_NODE", "8"}};
    return run(concat(words("pt --model_preset qwen3-30b-a3b --bf16 --seq_length 4096 --global_batch_size 16 "
                            "--train_iters 1 --lr_warmup_iters 0 --use_distributed_optimizer --dry_run " +
                            layout),
                      {"--output_dir", (tmp_ / "out").string()}),
               "qwen3", o);
  }
};

TEST_F(MoeCli, TinyMoeTrainsAndLogsMegatronMoeMetrics) {
  // The demo preset: 4 layers, hidden 256, 4 heads with 2 query groups (head dim 64), RMSNorm,
  // SwiGLU, untied, vocab 1024. MoE in layers 0 and 2 (freq 2): 4 experts of 128, top-2.
  const RunResult r = run(concat(demo_pt_args(30, tmp_ / "out"),
                                 words("--lr 3e-3 --num_experts 4 --moe_ffn_hidden_size 128 --moe_layer_freq 2 "
                                       "--moe_aux_loss_coeff 1e-2 --moe_z_loss_coeff 1e-3 --moe_grouped_gemm false")),
                          "moe");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::vector<std::string> lines = training_lines(r.out);
  ASSERT_EQ(lines.size(), 30u) << r.out;
  const double first = std::stod(field(lines.front(), "lm loss")), last = std::stod(field(lines.back(), "lm loss"));
  EXPECT_LT(last, 0.8 * first) << "the MoE model does not learn: " << first << " -> " << last;
  // Megatron's order: ... lm loss: X | load_balancing_loss: X.XX | z_loss: X.XX | loss scale: ...
  const std::string& l = lines.back();
  ASSERT_NE(l.find(" load_balancing_loss: "), std::string::npos) << l;
  EXPECT_LT(l.find(" lm loss: "), l.find(" load_balancing_loss: "));
  EXPECT_LT(l.find(" load_balancing_loss: "), l.find(" z_loss: "));
  EXPECT_LT(l.find(" z_loss: "), l.find(" loss scale: "));
  // aux_loss = E * sum_e f_e P_e >= 1 (equality when perfectly balanced); printed as Megatron's
  // total_loss_dict entries ({:.6E}, averaged over the log interval of 1 here).
  const double lbl = std::stod(field(l, "load_balancing_loss"));
  EXPECT_GE(lbl, 0.99);
  const auto rows = train_rows(tmp_ / "out");
  ASSERT_EQ(rows.size(), 30u);
  EXPECT_EQ(field(l, "load_balancing_loss"), sci6(rows.back().at("load_balancing_loss").get<double>()));
  EXPECT_TRUE(rows.back().contains("z_loss"));

  // Parameters (§1b, n = 1 for RMSNorm, m = 3/2, r_q = 1, g/a = 1/2, V = 1024 untied):
  //   attn = 2 h^2 (1 + 1/2) = 196608; dense = 2h(ffn m + 1) + attn with ffn 688 (the preset's)
  //   moe = 2h(ffn_moe E m + 1) + attn + h E (router); total = 2 dense + 2 moe + h + 2 V h,
  //   plus the QKV bias the formula leaves out (add_qkv_bias: (a + 2g) d = 512 per layer).
  const double h = 256, attn = 2 * h * h * 1.5 + 512;
  const double dense = 2 * h * (688 * 1.5 + 1) + attn, moe = 2 * h * (128 * 4 * 1.5 + 1) + attn + h * 4;
  const auto total = static_cast<int64_t>(2 * dense + 2 * moe + h + 2 * 1024 * h);
  EXPECT_NE(
      r.out.find("number of parameters on (tensor, pipeline) model parallel rank (0, 0): " + std::to_string(total)),
      std::string::npos)
      << "expected " << total << "\n"
      << r.out;
}

double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(a), 1e-30); }

// MoE under TP 2 + SP, with whole experts per rank (ETP 1) and with experts
// split over TP (ETP 2), equals the single device for 20 iterations: loss,
// grad norm and the logged router losses within 1e-5 (the bound and the lr of
// ParallelEquivalence in test_mtrain_parallel.cc). pt rows are full length:
// with sft rows of odd length, SP pads each row to a multiple of TP, and the
// router (like Megatron's without a padding mask) counts those extra padding
// tokens in its load-balancing statistics, so padded layouts are not comparable.
TEST_F(MoeCli, TensorParallelRunsEqualTheSingleDevice) {
  const std::string moe =
      "--lr 3e-4 --num_experts 4 --moe_ffn_hidden_size 128 --moe_layer_freq 2 "
      "--moe_aux_loss_coeff 1e-2 --moe_z_loss_coeff 1e-3";
  const RunResult ref = run(concat(demo_pt_args(20, tmp_ / "ref"), words(moe)), "ref");
  ASSERT_EQ(ref.exit_code, 0) << ref.describe();
  const auto a = train_rows(tmp_ / "ref");
  ASSERT_EQ(a.size(), 20u);
  for (const std::string etp : {"1", "2"}) {
    const fs::path out = tmp_ / ("etp" + etp);
    const RunResult par = run(concat(demo_pt_args(20, out), words(moe +
                                                                  " --tensor_model_parallel_size 2 --sequence_parallel "
                                                                  "--expert_tensor_parallel_size " +
                                                                  etp)),
                              "etp" + etp, launch_ranks(2));
    ASSERT_EQ(par.exit_code, 0) << par.describe();
    const auto b = train_rows(out);
    ASSERT_EQ(b.size(), 20u);
    for (size_t i = 0; i < a.size(); ++i)
      for (const char* key : {"loss", "grad_norm", "load_balancing_loss", "z_loss"})
        EXPECT_LE(rel(a[i].at(key).get<double>(), b[i].at(key).get<double>()), 1e-5)
            << "ETP " << etp << " iteration " << i + 1 << ": " << key << " " << a[i].at(key) << " vs " << b[i].at(key);
  }
}

// --dry_run of an MoE job (shape only: no routing, no data) holds exactly the
// parameters of the formula above, with a shared expert and its gate:
//   per MoE layer: attn + router h E + experts E * 3 h f + shared 3 h f_s + gate h + norms 2 h.
TEST_F(MoeCli, DryRunAccountsTheExpertWeights) {
  const RunResult r = run(concat(words("sft configs/sft_demo.yaml --dry_run --num_experts 8 --moe_ffn_hidden_size 128 "
                                       "--moe_shared_expert_intermediate_size 256 --moe_shared_expert_gate"),
                                 {"--output_dir", (tmp_ / "out").string()}),
                          "dry");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const int64_t h = 256, attn = 2 * h * h * 3 / 2 + 512;
  const int64_t layer = attn + h * 8 + 8 * 3 * h * 128 + 3 * h * 256 + h + 2 * h;
  const int64_t total = 4 * layer + h + 2 * 1024 * h;  // 4 MoE layers (freq 1), final norm, untied embeddings
  EXPECT_NE(r.out.find("parameters on this device                     " + std::to_string(total)), std::string::npos)
      << "expected " << total << "\n"
      << r.out;
  EXPECT_NE(r.out.find("MoE 8 experts (top-2, ffn 128) in 4 of 4 layers, shared expert 256 (gated)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("The plan FITS on every device."), std::string::npos) << r.out;
}

// Qwen3-30B-A3B (the preset: its published config.json) planned on 16 NPUs,
// two nodes of 8: TP 4 with SP, the experts split over TP (ETP 4), PP 4, no
// expert parallelism, bf16 with the distributed optimizer. Megatron's theoretical_memory_usage (estimator-formulas.md
// §1b, EP-aware form), by hand: h 2048, a 32, g 4, kv_channels 128 (r_q = 2), SwiGLU (m = 3/2), RMSNorm (n = 1), E 128
// of ffn 768 in all 48 layers, V_pad = 151936 up to a multiple of 128 x TP 4 = 152064.
//   attn = 2 h^2 (1 + g/a) r_q = 18874368 a layer: sharded 48 attn / p
//   replicated = n h (final norm) + 48 (2 n h + h E) = 12781568, / p
//   routed = 48 x 2 h 768 E m = 28991029248, / p / (ETP x EP)
//   shard = (48 attn / 4 + V_pad h) / 4 + 12781568 / 4 = 137675264 (p > 1: no output-layer term)
//   experts = 28991029248 / 4 / 4 = 1811939328
//   d = EDP = 16 / (4 x 4) = 1: (6 + 12/1) bytes each -> 18 x 1949614592 = 35093062656 B = 32.68 GiB.
// mtrain's stage 0 holds V_pad h / 4 + 12 layers x (attn / 4 + 2 h + h E + experts / 4 + 2 x 128 q/k norm)
// = 1949617152 parameters: the formula counts its share of the final norm (on the last stage in mtrain)
// and no q/k norm.
TEST_F(MoeCli, DryRunOfQwen3MoeOnSixteenNpusMatchesMegatronsFormula) {
  const RunResult r = qwen3_on_sixteen_npus(
      "--tensor_model_parallel_size 4 --sequence_parallel --expert_tensor_parallel_size 4 "
      "--pipeline_model_parallel_size 4 --recompute_granularity selective");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("16 ranks (tensor parallel 4, pipeline parallel 4, data parallel 1)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("MoE 128 experts (top-8, ffn 768) in 48 of 48 layers"), std::string::npos) << r.out;
  const int64_t h = 2048, E = 128, attn = 2 * h * h * 9 / 8 * 2, experts = 2 * h * 768 * E * 3 / 2;
  // --qk_layernorm: q_norm and k_norm (2 x head_dim 128, replicated over TP) per layer, which
  // Megatron's formula does not count.
  const int64_t stage0 = 152064 * h / 4 + 12 * (attn / 4 + 2 * h + h * E + experts / 4 + 2 * 128);
  EXPECT_EQ(stage0, 1949617152);
  EXPECT_NE(r.out.find("parameters on this device" + std::string(27 - std::to_string(stage0).size() + 1, ' ') +
                       std::to_string(stage0)),
            std::string::npos)
      << r.out;
  const double formula = 18.0 * ((48 * attn / 4 + 152064 * h) / 4 + (h + 48 * (2 * h + h * E)) / 4 + 48 * experts / 16);
  EXPECT_EQ(formula, 35093062656.0);
  char gib[64];
  std::snprintf(gib, sizeof gib, "theoretical_memory_usage %.2f GiB", formula / (1 << 30));
  EXPECT_NE(r.out.find(gib), std::string::npos) << gib << "\n" << r.out;
  EXPECT_NE(r.out.find("The plan FITS on every device."), std::string::npos) << r.out;
}

// Qwen3-30B-A3B (the preset) on 16 NPUs, two nodes of 8: TP 4 + SP, EP 4
// x ETP 4 (expert DP 1), no PP, dense DP 4, bf16, distributed optimizer.
// Megatron's theoretical_memory_usage in its EP-aware form
// (estimator-formulas.md 1b): TP-sharded attention and (untied, p = 1) both
// vocabulary tables / t, replicated norms and router whole, at 6 + 12/d bytes
// (d = DP 4); routed experts / (ETP x EP) at 6 + 12/EDP (EDP = 1). By hand:
// h 2048, E 128, ffn 768, SwiGLU, V_pad 152064, 48 layers.
TEST_F(MoeCli, DryRunOfQwen3MoeWithExpertParallelMatchesMegatronsFormula) {
  const RunResult r = qwen3_on_sixteen_npus(
      "--tensor_model_parallel_size 4 --sequence_parallel --expert_tensor_parallel_size 4 "
      "--expert_model_parallel_size 4 --recompute_granularity full --recompute_method uniform "
      "--recompute_num_layers 1");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const int64_t h = 2048, E = 128, V = 152064, attn = 2 * h * h * 9 / 8 * 2, experts = 2 * h * 768 * E * 3 / 2;
  const int64_t dense = (48 * attn + 2 * V * h) / 4 + (h + 48 * (2 * h + h * E)), routed = 48 * experts / 16;
  EXPECT_EQ(dense + routed, 2206926848);
  // --qk_layernorm: 48 x 2 x 128 q/k norm weights (replicated) that Megatron's formula leaves out;
  // their 9 x 12288 bytes do not move its GiB at two decimals.
  EXPECT_NE(r.out.find("parameters on this device                  " + std::to_string(dense + routed + 48 * 2 * 128)),
            std::string::npos)
      << r.out;
  const double formula = 9.0 * dense + 18.0 * routed;
  EXPECT_EQ(formula, 36169795584.0);
  char gib[96];
  std::snprintf(gib, sizeof gib, "weights+grads+optimizer %.2f GiB, theoretical_memory_usage %.2f GiB",
                formula / (1 << 30), formula / (1 << 30));
  EXPECT_NE(r.out.find(gib), std::string::npos) << gib << "\n" << r.out;
  EXPECT_NE(r.out.find("The plan FITS on every device."), std::string::npos) << r.out;
}

}  // namespace
}  // namespace mtrain::functional
