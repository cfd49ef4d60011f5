#include "model/flops.h"

namespace mtrain::model {

double megatron_flops_per_iteration(const ModelConfig& c, int64_t global_batch, int64_t seq_length) {
  const double B = static_cast<double>(global_batch), s = static_cast<double>(seq_length);
  const double L = static_cast<double>(c.num_layers), h = static_cast<double>(c.hidden);
  const double a = static_cast<double>(c.heads), g = static_cast<double>(c.groups);
  const double query_ratio = a * static_cast<double>(c.head_dim) / h;
  const double gated = c.swiglu ? 1.5 : 1.0;
  // The MLP widths summed over layers: a dense layer's ffn, an MoE layer's
  // top-k routed experts plus its shared expert (Megatron's routed-experts and
  // shared-experts terms; the router's GEMM is not counted, as in Megatron).
  double mlp_width = 0;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    mlp_width += c.is_moe_layer(i)
                     ? static_cast<double>(c.moe.ffn) * c.moe.router.topk + static_cast<double>(c.moe.shared_ffn)
                     : static_cast<double>(c.ffn);
  }
  return 12.0 * B * s * h * h *
         (L * (1.0 + g / a + s / h) * query_ratio + mlp_width / h * gated +
          static_cast<double>(c.padded_vocab) / (2.0 * h));
}

}  // namespace mtrain::model
