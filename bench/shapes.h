// The model shapes of the benchmarks, as model::ModelConfig: bench_train
// builds them directly, bench_parallel turns tiny_llama() into mtrain flags.
#pragma once

#include <string>

#include "model/model_config.h"

namespace mtrain::bench {

struct ShapeSpec {
  std::string name;
  model::ModelConfig config;  // micro_batch and seq_length give the step's (B, T)
};

// The two shapes of bench_train: GPT-2 small (B=4, T=64) and a tiny Llama (B=8, T=256).
ShapeSpec gpt2_small();
ShapeSpec tiny_llama();

}  // namespace mtrain::bench
