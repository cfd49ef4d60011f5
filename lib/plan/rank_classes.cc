#include "plan/rank_classes.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

namespace mtrain::plan {

std::vector<RankClass> rank_classes(const parallel::ProcessGrid& grid, bool distributed_optimizer) {
  // Only the rank in the DP x CP group (the dense optimizer shards, train/grad_regions.h)
  // decides a shard, so only with DP x CP > 1 does it split classes.
  const bool by_shard = distributed_optimizer && grid.dp() * grid.cp() > 1;
  std::map<std::pair<int, int>, RankClass> classes;
  for (int r = 0; r < grid.world_size(); ++r) {
    const parallel::RankCoords c = grid.coords(r);
    RankClass& k = classes[{c.pp, by_shard ? grid.rank_in_group(parallel::GroupKind::kDataContext, r) : 0}];
    if (k.ranks.empty()) {
      k.representative = r;
      k.stage = c.pp;
    }
    k.ranks.push_back(r);
  }
  std::vector<RankClass> out;
  for (auto& [key, k] : classes) out.push_back(std::move(k));
  return out;
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!s.empty()) s += ",";
    s += j == i ? fmt::format("{}", ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    i = j + 1;
  }
  return s;
}

}  // namespace mtrain::plan
