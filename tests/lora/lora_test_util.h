// Shared fixtures of the LoRA tests: a tiny model with adapters on every
// linear, and a way to give B non-zero values (at B = 0, PEFT's init, the
// gradient of A is exactly zero, so a gradient check would prove nothing).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/rng.h"
#include "model/model_test_util.h"

namespace mtrain::lora::testing {

// tiny_llama with adapters of rank 4 on every linear (alpha 8: scale 2).
inline model::ModelConfig tiny_lora(model::ModelConfig c = model::testing::tiny_llama()) {
  c.lora.enabled = true;
  c.lora.rank = 4;
  c.lora.alpha = 8;
  c.lora.dropout = 0.f;
  c.lora.target_modules = linear_layer_names();
  return c;
}

// Fills every lora_B with N(0, 0.2^2): afterwards the adapters change the model.
inline void randomize_lora_b(model::ParamStore& ps, uint64_t seed) {
  Rng rng(seed);
  for (int i = 0; i < static_cast<int>(ps.infos().size()); ++i) {
    const model::ParamInfo& p = ps.info(i);
    if (p.name.find(".lora_B.") == std::string::npos) continue;
    for (int64_t j = 0; j < p.numel; ++j) ps.param(i)[j] = static_cast<float>(rng.normal() * 0.2);
  }
}

// n values uniform in [-1, 1).
inline std::vector<float> random_uniform(int64_t n, uint64_t seed) {
  Rng r(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(2 * r.uniform() - 1);
  return v;
}

// PEFT's init (B = 0) makes step 0 the base model: the same losses bit for
// bit; with B != 0 the adapters move them (they are really there).
inline void expect_step_zero_is_the_base(const model::ModelConfig& base, const model::ModelConfig& lora) {
  device::Device dev(device::DeviceProfile{}, 0);
  model::GptModel mb(base, dev), ml(lora, dev);
  model::testing::RandomBatch rb = model::testing::random_batch(base.micro_batch, base.seq_length, base.vocab, 4);
  const model::TokenBatch b = rb.view(base.micro_batch, base.seq_length, true);
  mb.forward(b, 3, true);
  ml.forward(b, 3, true);
  const int64_t n = base.micro_batch * base.seq_length;
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(mb.losses()[i], ml.losses()[i]) << "token " << i;
  randomize_lora_b(ml.params(), 1);
  ml.forward(b, 3, true);
  double moved = 0;
  for (int64_t i = 0; i < n; ++i) moved = std::max(moved, std::abs(double(mb.losses()[i]) - ml.losses()[i]));
  EXPECT_GT(moved, 1e-3);
}

}  // namespace mtrain::lora::testing
