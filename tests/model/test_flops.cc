// Megatron's FLOPs per iteration (model/flops.h, estimator-formulas.md §1d)
// against Korthikanti et al. 2022's Eq. 7 for a GPT-3 175B shape, and the
// formula's SwiGLU and grouped-query terms written out by hand.
#include <gtest/gtest.h>

#include "model/flops.h"

namespace mtrain::model {
namespace {

TEST(MegatronFlops, EqualsKorthikantiEquationSevenForGpt3) {
  ModelConfig c;
  c.num_layers = 96;
  c.hidden = 12288;
  c.heads = c.groups = 96;
  c.head_dim = 128;
  c.ffn = 4 * 12288;
  c.padded_vocab = 51200;
  c.swiglu = false;
  const double B = 1536, s = 2048, L = 96, h = 12288, V = 51200;
  const double eq7 = 72 * B * L * s * h * h * (1 + s / (6 * h) + V / (12 * h * L));
  EXPECT_NEAR(megatron_flops_per_iteration(c, 1536, 2048), eq7, 1e-12 * eq7);
}

TEST(MegatronFlops, SwigluAndGroupedQueryTerms) {
  // §1d by hand for a Llama-2-70B shape: g/a = 8/64, ffn/h = 28672/8192, m = 3/2.
  ModelConfig c;
  c.num_layers = 80;
  c.hidden = 8192;
  c.heads = 64;
  c.groups = 8;
  c.head_dim = 128;
  c.ffn = 28672;
  c.padded_vocab = 32000;
  c.swiglu = true;
  const double B = 1024, s = 4096, L = 80, h = 8192;
  const double f = 12 * B * s * L * h * h * ((1 + 8.0 / 64 + s / h) + 28672 / h * 1.5 + 32000 / (2 * L * h));
  EXPECT_NEAR(megatron_flops_per_iteration(c, 1024, 4096), f, 1e-12 * f);
}

TEST(MegatronFlops, MoeRoutedAndSharedExpertTerms) {
  // Megatron's num_floating_point_operations (training.py) for an MoE model,
  // per token: 3 (fwd, wgrad, dgrad) x 2 (FMA) x h x 3 (SwiGLU) x
  // [ffn x dense layers + (moe_ffn x topk + shared) x MoE layers], plus the
  // attention and logit terms of the dense formula. Qwen1.5-MoE-A2.7B-like:
  // 24 layers, h 2048, 60 experts of 1408, top-4, shared 5632; every other layer MoE.
  ModelConfig c;
  c.num_layers = 24;
  c.hidden = 2048;
  c.heads = c.groups = 16;
  c.head_dim = 128;
  c.ffn = 5632;
  c.padded_vocab = 151936;
  c.swiglu = true;
  c.moe.num_experts = 60;
  c.moe.ffn = 1408;
  c.moe.router.topk = 4;
  c.moe.shared_ffn = 5632;
  for (int i = 0; i < 24; ++i) c.moe.layers.push_back(i % 2 == 0 ? 1 : 0);
  const double B = 32, s = 4096, h = 2048, L = 24, V = 151936;
  const double tokens = B * s;
  const double mlp = 3 * 2 * h * 3 * (5632.0 * 12 + (1408.0 * 4 + 5632) * 12);
  const double attn = 3 * 2 * (h * (h + h + h) + h * h) * L + 3 * 2 * h * 2 * s * L;
  const double logit = 3 * 2 * h * V;
  const double f = tokens * (mlp + attn + logit);
  EXPECT_NEAR(megatron_flops_per_iteration(c, 32, 4096), f, 1e-12 * f);
}

}  // namespace
}  // namespace mtrain::model
