// Internal to lib/model: what the transformer layer's files share.
// transformer_layer.cc runs forward / backward, transformer_buffers.cc
// allocates LayerActs / Workspace; both size them with dims().
#pragma once

#include <cstdint>

#include "model/model_config.h"

namespace mtrain::model::detail {

// This rank's shares of the layer's dimensions.
struct Dims {
  int64_t B, T, N, Nl, C, H, G, D, F, QKV, FC1;
};
inline Dims dims(const ModelConfig& c, int64_t B, int64_t T) {
  const int64_t N = B * T;
  return {B,
          T,
          N,
          c.tokens_local(N),
          c.hidden,
          c.heads_local(),
          c.groups_local(),
          c.head_dim,
          c.ffn_local(),
          c.qkv_width_local(),
          c.fc1_width_local()};
}

}  // namespace mtrain::model::detail
