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

// What the benchmarks count as a step's useful work (not Megatron's logging
// formula, model/flops.h, which counts causal attention whole): parameters
// that take part in GEMMs (all linear weights incl. the LM head), and the
// model FLOPs of one training step over `tokens` tokens of length-T
// sequences: 6 * matmul_params * tokens (fwd + bwd) + causal attention
// 6 * L * H * D * T * tokens (QK^T and PV, fwd 2 GEMMs * 2 flops, bwd twice
// that, halved for causality).
int64_t matmul_params(const model::ModelConfig& c);
double model_flops(const model::ModelConfig& c, int64_t tokens, int64_t T);

}  // namespace mtrain::bench
