// The dry run against the published formulas (estimator-formulas.md): the
// weights, gradients and optimizer states of Megatron's
// theoretical_memory_usage (§1b) and the per-layer activations of
// Korthikanti et al. 2022 (Table 2, SP + selective recompute), for the
// paper's Table 3 shapes, GPT-3 175B and the Llama/Qwen presets. Expected
// values are computed here from the formulas; where mtrain's real code path
// holds something the formula leaves out (or leaves out something it
// counts), the difference is computed term by term and named.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "config/cli.h"
#include "plan/dry_run.h"
#include "plan/dry_run_fixture.h"
#include "plan/formula_compare.h"

namespace mtrain::plan {
namespace {

using device::MemCategory;

config::Args parse_from_repo(const std::string& flags, int world) {
  std::filesystem::current_path(MTRAIN_SOURCE_DIR);  // presets are found under configs/
  return parse(flags, world);
}

double bytes(const ClassMemory& c, MemCategory k) {
  return static_cast<double>(c.stats.by_category[static_cast<int>(k)]);
}
double state_bytes(const ClassMemory& c) {
  return bytes(c, MemCategory::kWeights) + bytes(c, MemCategory::kGrads) + bytes(c, MemCategory::kOptimizer);
}

// A shape of Korthikanti et al.'s Table 3 (s = 2048, V = 51200, t = 8).
struct Shape {
  const char* name;
  int64_t a, h, L, p;
  double fig1_params_opt_gib;  // Fig. 1, as read off by Calculon
};
void PrintTo(const Shape& s, std::ostream* os) { *os << s.name; }

const Shape kTable3[] = {{"22B", 64, 6144, 48, 1, 45.5625},
                         {"175B", 96, 12288, 96, 8, 45.5625},
                         {"530B", 128, 20480, 105, 35, 31.640625},
                         {"1T", 160, 25600, 128, 64, 32.958984375}};
constexpr int64_t kT = 8, kS = 2048, kV = 51200;

// GPT-3-style flags (LayerNorm, GELU, 4h FFN, learned positions, tied, biases) for a Table 3 shape.
std::string gpt_flags(const Shape& s) {
  return "pt --model_preset gpt3-175b --bf16 --num_layers " + std::to_string(s.L) + " --hidden_size " +
         std::to_string(s.h) + " --ffn_hidden_size " + std::to_string(4 * s.h) + " --num_attention_heads " +
         std::to_string(s.a) + " --seq_length 2048 --vocab_size 51200 --micro_batch_size 1 --train_iters 1 " +
         "--lr_warmup_iters 0 --tensor_model_parallel_size 8 --sequence_parallel --recompute_granularity selective " +
         "--pipeline_model_parallel_size " + std::to_string(s.p) + " --output_dir " +
         (std::filesystem::temp_directory_path() / ("mtrain_fid_" + std::to_string(getpid()))).string();
}

// theoretical_memory_usage.py (§1b): the most loaded shard (first stage) of
// a LayerNorm (n = 2), non-SwiGLU (m = 1), MHA (r_q = 1, g = a), tied model.
double megatron_shard(const Shape& s) {
  const double h = static_cast<double>(s.h), ffn = 4 * h, n = 2;
  const double attn = 2 * h * h * 2;
  const double dense = 2 * h * (ffn + n) + attn;
  const double block = dense * static_cast<double>(s.L) + n * h;
  return (block / static_cast<double>(s.p) + static_cast<double>(kV) * h) / kT;
}

// What mtrain's first stage holds beyond that shard, term by term (as
// Megatron's code holds it): the two LayerNorms' weight and bias whole on
// every TP rank (the formula divides them by t), the linear biases the
// formula ignores (QKV 3h and FC1 ffn split by t; proj and FC2 whole), the
// learned position embeddings (s x h, replicated), and the final norm, which
// the formula spreads over the stages but lives on the last one.
double mtrain_extra_params(const Shape& s) {
  const double h = static_cast<double>(s.h), ffn = 4 * h, Ls = static_cast<double>(s.L / s.p);
  const double norms = Ls * 4 * h * (1 - 1.0 / kT);
  const double biases = Ls * (3 * h / kT + h + ffn / kT + h);
  const double positions = static_cast<double>(kS) * h;
  const double final_norm = (s.p == 1 ? 2 * h : 0) - 2 * h / static_cast<double>(s.p * kT);
  return norms + biases + positions + final_norm;
}

class Table3 : public ::testing::TestWithParam<Shape> {};

// Fig. 1's params + optimizer = 18 B x 12Lh^2/(t p): a check of the formula
// as written here, independent of mtrain.
TEST_P(Table3, FormulaReproducesFigureOne) {
  const Shape& s = GetParam();
  const double h = static_cast<double>(s.h);
  EXPECT_EQ(18 * 12 * static_cast<double>(s.L) * h * h / static_cast<double>(kT * s.p) / (1LL << 30),
            s.fig1_params_opt_gib);
}

// bf16 params, fp32 grads, fp32 master + Adam: 18 B/param without the
// distributed optimizer; with it at DP 2, 6 + 12/2 B/param.
TEST_P(Table3, WeightsGradsOptimizerEqualMegatronPlusNamedTerms) {
  const Shape& s = GetParam();
  const int world = static_cast<int>(kT * s.p);
  const double params = megatron_shard(s) + mtrain_extra_params(s);
  const DryRun r = dry_run(parse_from_repo(gpt_flags(s) + " --global_batch_size " + std::to_string(s.p), world));
  const ClassMemory& c = r.classes.at(0);
  ASSERT_EQ(c.rank_class.stage, 0);
  EXPECT_NEAR(static_cast<double>(c.parameters), params, 1.0);  // the formula's block/p is fractional
  EXPECT_GE(state_bytes(c), 18 * std::floor(params));
  EXPECT_NEAR(state_bytes(c) / (18 * params), 1.0, 1e-6);  // DP bucket padding only
  const DryRun d = dry_run(parse_from_repo(
      gpt_flags(s) + " --global_batch_size " + std::to_string(2 * s.p) + " --use_distributed_optimizer", 2 * world));
  for (const ClassMemory& k : d.classes)
    if (k.rank_class.stage == 0) {
      EXPECT_NEAR(state_bytes(k) / (12 * params), 1.0, 1e-6) << "dp rank " << k.dp_rank;
    }
}

// Activation bytes of one transformer layer (one micro-batch slot), measured
// as the dry run's difference between L and L - 1 layers at p = 1.
double layer_activation_bytes(const std::string& flags, int64_t L, int world) {
  const DryRun full = dry_run(parse_from_repo(flags + " --num_layers " + std::to_string(L), world));
  const DryRun less = dry_run(parse_from_repo(flags + " --num_layers " + std::to_string(L - 1), world));
  return bytes(full.classes.at(0), MemCategory::kActivations) - bytes(less.classes.at(0), MemCategory::kActivations);
}

// Korthikanti Table 2, TP + SP + selective recompute: 34 sbh/t per layer
// (Megatron's code: sbh(18 + 4 ffn/h)/t). mtrain's layer differs by: no
// dropout masks (regenerated from the seed: -2 sbh/t for the two 1-byte
// masks), the attention output kept per head for the flash backward besides
// the merged copy (+2 sbh/t), fp32 norm statistics (mean and rstd per token
// for each LayerNorm: +16 sb/t; rstd only for RMSNorm: +8 sb/t) and the
// flash log-sum-exp (fp32 per head and token: +4 s b a/t).
TEST_P(Table3, LayerActivationsEqualKorthikantiPlusNamedTerms) {
  const Shape& s = GetParam();
  const double sbh = static_cast<double>(kS * s.h), sb = kS;
  const double korthikanti = 34 * sbh / kT;
  const double expected = korthikanti - 2 * sbh / kT + 2 * sbh / kT + 16 * sb / kT + 4 * sb * s.a / kT;
  Shape p1 = s;
  p1.p = 1;
  EXPECT_EQ(layer_activation_bytes(gpt_flags(p1) + " --global_batch_size 1", s.L, kT), expected);
}

// The report's "vs Megatron's formulas" section prints the formulas' values
// (computed here: §1b shard x 18 B; §1c first stage, 1F1B with as many
// micro-batches as stages: (34sbhL + 8sbp + sbhp)/t, at p = 1 plus the output
// layer's input and fp32 logits 4sbh(1 + V/h)/t) and mtrain's difference.
TEST_P(Table3, ReportPrintsTheFormulasAndTheDifference) {
  const Shape& s = GetParam();
  const config::Args args = parse_from_repo(gpt_flags(s) + " --global_batch_size " + std::to_string(s.p), kT * s.p);
  const double sbh = static_cast<double>(kS * s.h), p = static_cast<double>(s.p), L = static_cast<double>(s.L);
  double act = (34 * sbh * L + 8 * kS * p + sbh * p) / kT;
  if (s.p == 1) act += 4 * sbh * (1 + static_cast<double>(kV) / static_cast<double>(s.h)) / kT;
  const double gib = 1LL << 30;
  const std::string text = formula_comparison(dry_run(args), args);
  EXPECT_NE(text.find(fmt::format("theoretical_memory_usage {:.2f} GiB", 18 * megatron_shard(s) / gib)),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(fmt::format("Korthikanti et al. {:.2f} GiB", act / gib)), std::string::npos) << text;
  const double per_layer = 16.0 * kS / kT + 4.0 * kS * static_cast<double>(s.a) / kT;  // norm stats + LSE
  EXPECT_NE(text.find(fmt::format("per layer and micro-batch {:+.1f} KiB", per_layer / 1024)), std::string::npos)
      << text;
}

INSTANTIATE_TEST_SUITE_P(Korthikanti, Table3, ::testing::ValuesIn(kTable3),
                         [](const ::testing::TestParamInfo<Shape>& i) { return std::string("m") + i.param.name; });

// GQA, SwiGLU and RMSNorm (Llama-2-7B, Qwen2.5-7B at TP 2 and 4): Megatron's
// per-layer sbh(18 + 4 ffn/h)/t counts K and V as h wide and the MLP as
// 4 ffn; mtrain holds K, V at g x head_dim (+4 sb (gD - h)/t) and the SwiGLU
// fc1 output 2 ffn wide (+2 sb ffn/t), with RMSNorm's rstd only (+8 sb/t).
struct GqaShape {
  const char* name;
  const char* preset;
  int64_t h, a, g, ffn, L, t;
};
void PrintTo(const GqaShape& s, std::ostream* os) { *os << s.name; }
class Gqa : public ::testing::TestWithParam<GqaShape> {};

TEST_P(Gqa, LayerActivationsEqualMegatronPlusNamedTerms) {
  const GqaShape& m = GetParam();
  const double s = 4096, sb = s, sbh = s * static_cast<double>(m.h), t = static_cast<double>(m.t);
  const double D = static_cast<double>(m.h / m.a), ffn = static_cast<double>(m.ffn);
  const double megatron = sbh * (18 + 4 * ffn / static_cast<double>(m.h)) / t;
  const double expected = megatron + 4 * sb * (static_cast<double>(m.g) * D - static_cast<double>(m.h)) / t +
                          2 * sb * ffn / t + 8 * sb / t + 4 * sb * static_cast<double>(m.a) / t;
  const std::string flags = std::string("pt --model_preset ") + m.preset +
                            " --bf16 --seq_length 4096 --micro_batch_size 1 --global_batch_size 1 --train_iters 1 "
                            "--lr_warmup_iters 0 --sequence_parallel --recompute_granularity selective "
                            "--tensor_model_parallel_size " +
                            std::to_string(m.t) + " --output_dir /tmp/mtrain_fid_unused";
  EXPECT_EQ(layer_activation_bytes(flags, m.L, static_cast<int>(m.t)), expected);
}

INSTANTIATE_TEST_SUITE_P(Presets, Gqa,
                         ::testing::Values(GqaShape{"llama2_7b_tp8", "llama2-7b", 4096, 32, 32, 11008, 32, 8},
                                           GqaShape{"qwen2_5_7b_tp2", "qwen2.5-7b", 3584, 28, 4, 18944, 28, 2},
                                           GqaShape{"qwen2_5_7b_tp4", "qwen2.5-7b", 3584, 28, 4, 18944, 28, 4}),
                         [](const ::testing::TestParamInfo<GqaShape>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace mtrain::plan
