// Internal to lib/train's checkpointing (checkpointing.h): where a rank's
// parameter shards sit in the full tensors, who writes them, and the
// optimizer states as full local buffers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/params.h"
#include "optim/optimizer.h"
#include "parallel/parallel_state.h"
#include "tensor/tensor.h"

namespace mtrain::train::detail {

// One rectangular piece of a full tensor held by this rank: its place in the
// full tensor and where it starts in the rank's local parameter.
struct ParamBlock {
  std::vector<int64_t> offsets;
  Shape shape;
  int64_t local_offset = 0;  // elements into the local shard
};

// The TP blocks of a parameter: one, or SwiGLU's fc1 as two (the rank's gate
// rows and its up rows, which sit F rows apart in the full tensor).
std::vector<ParamBlock> param_blocks(const model::ParamInfo& p);

// Copies the block at `offsets` of shape `shape` (1-D or 2-D) out of the
// row-major tensor `full` of shape `full_shape` into `out` (dense).
void copy_block(float* out, const std::vector<float>& full, const Shape& full_shape,
                const std::vector<int64_t>& offsets, const Shape& shape);

// The checkpoint name a parameter is read from: the tied-embedding copy on
// the last stage reads the word embeddings. Only parameters whose own name
// this is are written.
inline const std::string& source_name(const model::ParamInfo& p) { return p.init_name; }
inline bool saved_under_own_name(const model::ParamInfo& p) { return p.init_name == p.name; }

// Whether this rank writes parameter `index` (and its optimizer states): one
// rank per block in the world. DP replicas take turns by parameter; a
// TP-replicated tensor comes from TP rank 0.
// An expert-parallel parameter is written by one of its expert-DP replicas
// (the EP peers hold other experts; with ETP 1 the TP peers are expert-DP replicas).
bool writes_param(const model::ParamInfo& p, int index, const parallel::RankCoords& rc, int dp_size,
                  const parallel::ExpertRankCoords& ec, int expert_dp_size);

// A state buffer of the optimizer (state_numel() floats over
// state_intervals()) spread over the flat parameter layout (params.numel()
// floats, zeros elsewhere), all-gathered over each gradient region's
// data-parallel group (grad_regions.h) when the optimizer is sharded.
std::vector<float> full_state(const Tensor& state, const optim::Optimizer& opt, parallel::ParallelState& ps,
                              const model::ParamStore& params, int64_t bucket_elems);

// The inverse for a load: this rank's elements of `flat` into the state buffer.
void take_state(Tensor& state, const optim::Optimizer& opt, const std::vector<float>& flat);

}  // namespace mtrain::train::detail
