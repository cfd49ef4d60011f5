// Internal to lib/parallel: the element-wise folds behind every reduction, so
// that MpiComm, SimComm and a test's local reference compute the same bits.
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/comm.h"

namespace mtrain::parallel::detail {

// out[i] = ((inputs[0][i] op inputs[1][i]) op inputs[2][i]) ... for i < n, in
// the order of `inputs` (group-rank order). kMax/kMin propagate NaN. `out`
// must not alias any input.
void reduce_in_rank_order(void* out, const void* const* inputs, int num_inputs, int64_t n, ScalarType t, ReduceOp op);

// Splits n elements into `parts` contiguous chunks whose sizes differ by at
// most one (the first n % parts chunks are one larger).
struct ChunkLayout {
  std::vector<int64_t> counts;   // (parts)
  std::vector<int64_t> offsets;  // (parts), in elements
};
ChunkLayout chunk_layout(int64_t n, int parts);

}  // namespace mtrain::parallel::detail
