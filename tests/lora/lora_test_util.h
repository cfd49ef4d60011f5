// Shared fixtures of the LoRA tests: a tiny model with adapters on every
// linear, and a way to give B non-zero values (at B = 0, PEFT's init, the
// gradient of A is exactly zero, so a gradient check would prove nothing).
#pragma once

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

}  // namespace mtrain::lora::testing
