// GptModel::decode_chunk: the forward of one model chunk for the new tokens
// of an inference step, reading and extending the KV cache (model/kv_cache.h).
// The same layers, kernels and tensor-parallel communication as training's
// forward; only the attention core reads the cache instead of the batch.
#include <cstring>

#include "common/errors.h"
#include "model/gpt.h"

namespace mtrain::model {

const float* GptModel::decode_chunk(int c, KvCache& cache, const TokenBatch& b, const float* input) {
  const ModelConfig& cf = config_;
  if (b.B != 1 || cf.sequence_parallel || cf.layer_recomputed(0) || cache.length() + b.T > cache.capacity())
    throw Error(ExitCode::kInternal,
                "decode_chunk: one sequence within the cache, without sequence parallelism or recompute");
  Chunk& ch = chunks_[c];
  ChunkSlot& sl = slot_of(c, 0);
  const int64_t stride = residual_stride();
  float* res = sl.residuals.data();
  if (ch.spec.pre) {
    embed_forward(b, res, /*seed=*/0, /*training=*/false);
  } else {
    std::memcpy(res, input, sizeof(float) * b.T * cf.hidden);
  }
  const parallel::TpConfig tp = tp_config();
  for (int64_t i = 0; i < ch.spec.num_layers; ++i) {
    const KvLayerCache kv = cache.layer(ch.layer_index[i]);
    layer_forward(cf, tp, params_, layers_[ch.layer_index[i]], sl.layers[i], ws_, res + i * stride,
                  res + (i + 1) * stride, b, /*seed=*/0, /*training=*/false, &kv);
  }
  const float* out = res + ch.spec.num_layers * stride;
  if (!ch.spec.post) return out;
  head_forward(sl, b, out);
  return nullptr;
}

}  // namespace mtrain::model
