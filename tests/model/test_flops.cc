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

}  // namespace
}  // namespace mtrain::model
