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

// The dense shapes of bench_train: GPT-2 small (B=4, T=64) and a tiny Llama (B=8, T=256).
ShapeSpec gpt2_small();
ShapeSpec tiny_llama();
// Mixture-of-experts shapes: tiny_llama() with every MLP an MoE layer of 8
// experts of ffn 344, top-2 (Mixtral's layout: each token's active MLP is
// the dense 688), aux-loss 0.02 as Mixtral; the shared variant adds a gated
// shared expert of 688 (Qwen2-MoE's layout). `grouped`: --moe_grouped_gemm.
ShapeSpec tiny_moe(bool grouped);
ShapeSpec tiny_moe_shared(bool grouped);

// What the benchmarks count as a step's useful work: the parameters a token
// goes through in GEMMs (every linear weight incl. the LM head; in an MoE
// layer the top-k routed experts and the shared expert, i.e. the ACTIVE
// parameters, without the router's E x C gate, as Megatron counts), and the
// model FLOPs of one training step over `tokens` tokens of length-T
// sequences: 6 * matmul_params * tokens (fwd + bwd) + causal attention
// 6 * L * H * D * T * tokens (QK^T and PV, fwd 2 GEMMs * 2 flops, bwd twice
// that, halved for causality). This is Megatron-LM's current
// num_floating_point_operations for unpacked sequences (model/flops.h keeps
// the earlier form that counts causal attention whole).
int64_t matmul_params(const model::ModelConfig& c);
double model_flops(const model::ModelConfig& c, int64_t tokens, int64_t T);

}  // namespace mtrain::bench
