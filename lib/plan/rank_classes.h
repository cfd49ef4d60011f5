// Rank classes of a dry run: ranks whose device holds the same objects are
// simulated once. What a rank holds depends on its pipeline stage (layers,
// embedding, head, in-flight activation slots) and, under the distributed
// optimizer, on its data-parallel rank (the shard of the flat buffer it
// owns, which padding can make uneven). Tensor-parallel ranks hold equal
// shards (the vocabulary is padded to a multiple of TP), as do DP replicas
// without the distributed optimizer.
#pragma once

#include <string>
#include <vector>

#include "parallel/process_grid.h"

namespace mtrain::plan {

struct RankClass {
  int representative = 0;  // the rank that is simulated
  int stage = 0;           // its pipeline stage
  std::vector<int> ranks;  // every rank it stands for, ascending (representative first)
};

// Classes in order of (stage, DP rank); every rank of the grid is in exactly one.
std::vector<RankClass> rank_classes(const parallel::ProcessGrid& grid, bool distributed_optimizer);

// "0-7" / "0,2,4,6" / "0-3,8-11": the ranks as ascending ranges.
std::string ranks_text(const std::vector<int>& ranks);

}  // namespace mtrain::plan
