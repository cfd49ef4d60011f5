// Timed full training steps of one model shape: forward, backward (which
// zeroes the gradients first), grad norm, AdamW with the clip coefficient
// folded into its pass; the sequence train::Trainer runs for an fp32 model
// with one micro-batch per step, on random tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "shapes.h"

namespace mtrain::bench {

struct BenchOptions {
  int warmup_steps = 2;
  int steps = 5;
  double lr = 6e-4;
  double clip_grad = 1.0;  // Megatron's default --clip_grad
};

// Milliseconds of each phase of one step. backward includes zeroing the
// gradients (the first micro-batch's backward does it); grad_norm is the norm
// and the clip coefficient, whose scaling happens inside the AdamW pass.
struct PhaseMs {
  double forward = 0, backward = 0, grad_norm = 0, adamw = 0, total = 0;
  double optimizer() const { return grad_norm + adamw; }
};

struct ShapeResult {
  std::string name;
  std::string description;    // model::describe
  int64_t params = 0;         // flat parameter count
  int64_t matmul_params = 0;  // bench::matmul_params
  int64_t tokens_per_step = 0;
  double flops_per_step = 0;   // bench::model_flops
  std::vector<PhaseMs> steps;  // timed steps only
  PhaseMs median;              // per-phase medians over the timed steps
  PhaseMs best;                // the fastest timed step
  double last_loss = 0;        // mean loss of the last step (for rerun comparisons)
  double last_grad_norm = 0;
  uint64_t params_hash = 0;  // FNV-1a over the final parameter bits: reruns must match
};

ShapeResult run_shape(const ShapeSpec& spec, const BenchOptions& opts);

}  // namespace mtrain::bench
