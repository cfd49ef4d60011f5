// The key/value cache of inference: for every decoder layer this rank holds,
// the keys (after RoPE) and values of the tokens decoded so far, so each new
// token costs one pass over its own row plus attention over the cache —
// generation is linear in the number of tokens instead of quadratic.
//
// Per layer k and v are (G_loc, capacity, D): this rank's query groups only
// (tensor parallelism splits the cache like the heads), capacity = the
// model's seq_length. They live on the simulated device (category
// activations, named "kv cache layer N key/value"), so a cache that does not
// fit is an out-of-memory error like any other allocation.
#pragma once

#include <cstdint>
#include <vector>

#include "device/device.h"
#include "model/transformer_layer.h"
#include "tensor/tensor.h"

namespace mtrain::model {

class GptModel;

class KvCache {
 public:
  KvCache(const GptModel& model, device::Device& dev);

  int64_t length() const { return length_; }  // tokens cached (the next token's position)
  int64_t capacity() const { return capacity_; }
  // After every chunk of this rank ran the step's `n` tokens.
  void advance(int64_t n) { length_ += n; }
  // A new sequence (the memory stays allocated).
  void clear() { length_ = 0; }
  // Layer `local` (index among this rank's layers, in chunk order) for the next step.
  KvLayerCache layer(int64_t local);

 private:
  int64_t capacity_ = 0, length_ = 0;
  std::vector<Tensor> k_, v_;  // per local layer: (G_loc, capacity, D)
  Tensor scores_;              // (capacity) attention scratch
};

}  // namespace mtrain::model
