// The routed experts' GEMMs alone (moe/grouped_gemm.h), grouped vs looped:
// what explains the MoE rows' difference in bench_train. One MoE layer's
// fc1 and fc2 over the rows a step routes (tokens x top-k, split evenly over
// the experts), forward, input gradient and weight gradient, timed apart.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace mtrain::bench {

struct ExpertGemmTime {
  std::string gemm;       // "fc1 forward", "fc2 weight grad", ...
  double grouped_ms = 0;  // median over the reps
  double looped_ms = 0;
  double gflop = 0;  // 2 * M * OC * C / 1e9
};

// c: an MoE shape (bench::tiny_moe); tokens: rows before top-k; reps >= 1.
std::vector<ExpertGemmTime> time_expert_gemms(const model::ModelConfig& c, int64_t tokens, int reps);

}  // namespace mtrain::bench
