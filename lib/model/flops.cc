#include "model/flops.h"

namespace mtrain::model {

double megatron_flops_per_iteration(const ModelConfig& c, int64_t global_batch, int64_t seq_length) {
  const double B = static_cast<double>(global_batch), s = static_cast<double>(seq_length);
  const double L = static_cast<double>(c.num_layers), h = static_cast<double>(c.hidden);
  const double a = static_cast<double>(c.heads), g = static_cast<double>(c.groups);
  const double query_ratio = a * static_cast<double>(c.head_dim) / h;
  const double gated = c.swiglu ? 1.5 : 1.0;
  return 12.0 * B * s * L * h * h *
         ((1.0 + g / a + s / h) * query_ratio + static_cast<double>(c.ffn) / h * gated +
          static_cast<double>(c.padded_vocab) / (2.0 * L * h));
}

}  // namespace mtrain::model
