// bench::model_flops (bench/shapes.h), the work the benchmarks divide by,
// against Megatron-LM's num_floating_point_operations (megatron/training/
// training.py at d98e8a64, 2026-08-22, unpacked sequences) written out here
// term by term: per token 3 (fwd, wgrad, dgrad) x 2 (FMA) x [h x (ffn x g x
// dense layers + (moe_ffn x topk + shared) x g x MoE layers) + L x (h x (q +
// k + v) + q x h) + h x Vp], g = 3 with SwiGLU else 2, plus per sequence
// s^2 x 3 x 2 x q / 2 (causal) x 2 (QK^T and PV) x L. The router's GEMM is
// not counted (neither does Megatron). The MoE shapes count ACTIVE
// parameters only: top-2 experts of 344 are the dense 688.
#include <gtest/gtest.h>

#include "shapes.h"

namespace mtrain::bench {
namespace {

double megatron_flops(const model::ModelConfig& c, double B, double s) {
  const double h = c.hidden, q = c.heads * c.head_dim, kv = c.groups * c.head_dim, L = c.num_layers;
  const double g = c.swiglu ? 3 : 2;
  double dense = 0, moe = 0;
  for (int64_t i = 0; i < c.num_layers; ++i) (c.is_moe_layer(i) ? moe : dense) += 1;
  const double mlp = h * (c.ffn * g * dense + c.moe.ffn * c.moe.router.topk * g * moe + c.moe.shared_ffn * g * moe);
  const double attn = L * (h * (q + 2 * kv) + q * h);
  const double per_token = 3 * 2 * (mlp + attn + h * c.padded_vocab);
  const double core = 3 * 2 * q / 2 * 2 * L;
  return B * s * per_token + B * s * s * core;
}

void expect_megatron(const ShapeSpec& spec) {
  const model::ModelConfig& c = spec.config;
  const int64_t T = c.seq_length, tokens = c.micro_batch * T;
  const double want = megatron_flops(c, static_cast<double>(c.micro_batch), static_cast<double>(T));
  // Integer-valued terms below 2^53 summed in another order: exact up to a few ulps.
  EXPECT_NEAR(model_flops(c, tokens, T), want, 1e-14 * want) << spec.name;
}

TEST(BenchFlops, DenseShapesAreMegatronsFormula) {
  expect_megatron(gpt2_small());
  expect_megatron(tiny_llama());
}

TEST(BenchFlops, MoeShapesCountTheActiveExpertsAsMegatron) {
  for (bool grouped : {true, false}) {
    expect_megatron(tiny_moe(grouped));
    expect_megatron(tiny_moe_shared(grouped));
  }
  // Every other layer MoE (--moe_layer_freq 2): dense and MoE layers counted apart.
  ShapeSpec mixed = tiny_moe_shared(true);
  for (size_t i = 0; i < mixed.config.moe.layers.size(); ++i) mixed.config.moe.layers[i] = i % 2 == 0;
  expect_megatron(mixed);
}

TEST(BenchFlops, TopTwoOfHalfWidthExpertsDoTheDenseModelsWork) {
  const ShapeSpec dense = tiny_llama(), moe = tiny_moe(true), shared = tiny_moe_shared(true);
  const int64_t T = dense.config.seq_length, tokens = dense.config.micro_batch * T;
  EXPECT_EQ(matmul_params(moe.config), matmul_params(dense.config));
  EXPECT_EQ(model_flops(moe.config, tokens, T), model_flops(dense.config, tokens, T));
  // The shared expert of 688 adds one dense MLP per layer: 3 x 688 x 256 x 4 layers.
  EXPECT_EQ(matmul_params(shared.config) - matmul_params(dense.config), 3 * 688 * 256 * 4);
}

}  // namespace
}  // namespace mtrain::bench
