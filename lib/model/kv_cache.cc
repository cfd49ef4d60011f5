#include "model/kv_cache.h"

#include "model/gpt.h"

namespace mtrain::model {

KvCache::KvCache(const GptModel& model, device::Device& dev) : capacity_(model.config().seq_length) {
  const ModelConfig& c = model.config();
  int64_t layers = 0;
  for (int ch = 0; ch < model.num_chunks(); ++ch) layers += model.chunk(ch).num_layers;
  for (int64_t i = 0; i < layers; ++i) {
    const Shape s = {c.groups_local(), capacity_, c.head_dim};       // (G_loc, capacity, D)
    const std::string name = "kv cache layer " + std::to_string(i);  // i: among this rank's layers
    k_.emplace_back(dev, s, c.dtype, device::MemCategory::kActivations, name + " key");
    v_.emplace_back(dev, s, c.dtype, device::MemCategory::kActivations, name + " value");
  }
  scores_ = Tensor(dev, {capacity_}, DType::kF32, device::MemCategory::kActivations, "kv cache attention scores");
}

KvLayerCache KvCache::layer(int64_t local) {
  return KvLayerCache{k_[local].data(), v_[local].data(), capacity_, length_, scores_.data()};
}

}  // namespace mtrain::model
