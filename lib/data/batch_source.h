// BatchSource: what the training loop reads its data from. Implementations
// cut the global batches of a dataset into this DP rank's micro-batches
// (data_pipeline.h's loader, indexed_source.h's Megatron order); tests and
// the dry run supply their own.
#pragma once

#include <cstdint>
#include <vector>

#include "data/loader.h"

namespace mtrain::data {

// Yields this DP rank's micro-batches of successive global batches: local
// micro-batch m is micro-batch m * dp + dp_rank of the global batch
// (Megatron's sampler), so its dropout masks match the single-device run.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual std::vector<Batch> next_global_batch() = 0;
  virtual int64_t global_batch_samples() const = 0;
  // Where the next global batch starts (the same on every DP rank): what a
  // checkpoint saves so a resumed run reads exactly the samples a straight
  // run would have, under any DP size.
  virtual DataLoader::State position() const = 0;
  virtual void set_position(const DataLoader::State& s) = 0;
};

}  // namespace mtrain::data
