// WeightSource: where a model's starting weights come from, read block by
// block in Megatron-core names and full (unsharded) shapes. Two sources:
// an mtrain checkpoint (CheckpointReader, sharded_checkpoint.h) and a
// Hugging Face model directory (hf_model_dir.h). lib/train's weight loading
// takes either, so `--load` and `--model <hf_dir>` share one code path and
// any TP/PP layout reads exactly its own blocks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace mtrain::checkpoint {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // For messages: the directory (and iteration) read.
  virtual std::string describe() const = 0;
  virtual bool has(const std::string& name) const = 0;
  // The full shape of tensor `name`; throws CheckpointError if absent.
  virtual Shape global_shape(const std::string& name) const = 0;
  // Fills `out` (row-major `shape`) with the block at `offsets` of `name`.
  // Throws CheckpointError naming the tensor when it is absent, the block is
  // out of bounds or the source cannot supply it.
  virtual void read_block(const std::string& name, const std::vector<int64_t>& offsets, const Shape& shape,
                          float* out) const = 0;
};

}  // namespace mtrain::checkpoint
