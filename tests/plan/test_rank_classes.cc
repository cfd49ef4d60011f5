// Rank classes: every rank in exactly one class, classes split by pipeline
// stage and (only under the distributed optimizer with DP > 1) by DP rank.
#include <gtest/gtest.h>

#include <set>

#include "plan/rank_classes.h"

namespace mtrain::plan {
namespace {

parallel::ProcessGrid grid(int world, int tp, int pp) {
  parallel::ProcessGridConfig c;
  c.world_size = world;
  c.tensor_model_parallel_size = tp;
  c.pipeline_model_parallel_size = pp;
  return parallel::ProcessGrid(c);
}

TEST(RankClasses, OneClassPerStageWithoutDistributedOptimizer) {
  const parallel::ProcessGrid g = grid(16, 2, 2);  // DP 4; Megatron order tp-cp-ep-dp-pp: stage = rank / 8
  const auto classes = rank_classes(g, false);
  ASSERT_EQ(classes.size(), 2u);
  EXPECT_EQ(classes[0].stage, 0);
  EXPECT_EQ(classes[0].representative, 0);
  EXPECT_EQ(ranks_text(classes[0].ranks), "0-7");
  EXPECT_EQ(classes[1].stage, 1);
  EXPECT_EQ(classes[1].representative, 8);
  EXPECT_EQ(ranks_text(classes[1].ranks), "8-15");
}

TEST(RankClasses, DistributedOptimizerSplitsByDataRank) {
  const parallel::ProcessGrid g = grid(8, 2, 2);  // DP 2
  const auto classes = rank_classes(g, true);
  ASSERT_EQ(classes.size(), 4u);
  std::set<int> seen;
  for (const RankClass& k : classes) {
    ASSERT_EQ(k.ranks.size(), 2u) << "the two TP ranks of one (stage, DP rank)";
    const parallel::RankCoords c0 = g.coords(k.ranks[0]), c1 = g.coords(k.ranks[1]);
    EXPECT_EQ(c0.pp, k.stage);
    EXPECT_EQ(c1.pp, k.stage);
    EXPECT_EQ(c0.dp, c1.dp);
    EXPECT_NE(c0.tp, c1.tp);
    seen.insert(k.ranks.begin(), k.ranks.end());
  }
  EXPECT_EQ(seen.size(), 8u);
  // DP 1: the distributed optimizer shards nothing, one class per stage.
  EXPECT_EQ(rank_classes(grid(8, 8, 1), true).size(), 1u);
}

TEST(RankClasses, RanksText) {
  EXPECT_EQ(ranks_text({0}), "0");
  EXPECT_EQ(ranks_text({0, 2, 4, 6}), "0,2,4,6");
  EXPECT_EQ(ranks_text({0, 1, 2, 3, 8, 9, 10, 11}), "0-3,8-11");
}

}  // namespace
}  // namespace mtrain::plan
