// Megatron's FLOPs per training iteration: the number behind its
// `throughput per GPU (TFLOP/s/GPU)` log figure (training.py,
// num_floating_point_operations; estimator-formulas.md §1d). One formula for
// the real run's log line (--log_throughput) and the dry run's report.
#pragma once

#include <cstdint>

#include "model/model_config.h"

namespace mtrain::model {

// fwd + bwd over a global batch of `global_batch` sequences of `seq_length`
// tokens, no recompute, causal attention not halved (as Megatron counts):
// 12 B s L h^2 [ (1 + g/a + s/h) (a d / h) + (ffn / h) m + Vp / (2 L h) ],
// m = 3/2 with SwiGLU (three ffn-wide GEMMs instead of two). An MoE layer's
// MLP term counts moe_ffn * topk + shared_ffn in place of ffn (Megatron's
// routed- and shared-experts terms). `whole_model`:
// the whole model's shape (any rank's config: layers, heads, ffn and the
// padded vocabulary are not split in it).
double megatron_flops_per_iteration(const ModelConfig& whole_model, int64_t global_batch, int64_t seq_length);

}  // namespace mtrain::model
