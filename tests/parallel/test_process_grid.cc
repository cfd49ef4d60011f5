// ProcessGrid against Megatron-LM's documented layouts and error messages.
#include <gtest/gtest.h>

#include <set>

#include "common/errors.h"
#include "parallel/process_grid.h"

namespace mtrain::parallel {
namespace {

using Groups = std::vector<RankGroup>;

ProcessGrid grid(int world, int tp, int pp, int cp = 1, bool tp_pp_dp = false, int ep = 1, int etp = 0) {
  ProcessGridConfig c;
  c.world_size = world;
  c.tensor_model_parallel_size = tp;
  c.pipeline_model_parallel_size = pp;
  c.context_parallel_size = cp;
  c.use_tp_pp_dp_mapping = tp_pp_dp;
  c.expert_model_parallel_size = ep;
  c.expert_tensor_parallel_size = etp;
  return ProcessGrid(c);
}

std::string config_error(int world, int tp, int pp, int cp = 1, bool tp_pp_dp = false, int ep = 1, int etp = 0) {
  try {
    grid(world, tp, pp, cp, tp_pp_dp, ep, etp);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

// generate_masked_orthogonal_rank_groups docstring: sizes [tp, dp, pp] = [2, 3, 4], mask dp.
TEST(ParallelProcessGrid, MaskedOrthogonalGroupsDocstringExample) {
  const Groups dp = masked_orthogonal_rank_groups(24, {2, 3, 4}, {false, true, false});
  ASSERT_EQ(dp.size(), 8u);
  EXPECT_EQ(dp[0], (RankGroup{0, 2, 4}));
  EXPECT_EQ(dp[1], (RankGroup{1, 3, 5}));
  EXPECT_EQ(dp[7], (RankGroup{19, 21, 23}));
  // "order tp-pp-dp, size 2-2-2: dp_group [[0, 4], [1, 5], [2, 6], [3, 7]]"
  EXPECT_EQ(masked_orthogonal_rank_groups(8, {2, 2, 2}, {false, false, true}),
            (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

// initialize_model_parallel docstring: 16 GPUs, TP=2, PP=4 (DP=2).
TEST(ParallelProcessGrid, MegatronDocstringExample) {
  const ProcessGrid g = grid(16, 2, 4);
  EXPECT_EQ(g.dp(), 2);
  EXPECT_EQ(g.order(), "tp-cp-ep-dp-pp");
  EXPECT_EQ(g.all_groups(GroupKind::kTensor),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(g.all_groups(GroupKind::kData),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(g.all_groups(GroupKind::kPipeline), (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(g.all_groups(GroupKind::kModel), (Groups{{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}}));
  EXPECT_EQ(g.all_groups(GroupKind::kEmbedding), (Groups{{0, 12}, {1, 13}, {2, 14}, {3, 15}}));
  EXPECT_EQ(g.all_groups(GroupKind::kPositionEmbedding), (Groups{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(g.all_groups(GroupKind::kDataContext), g.all_groups(GroupKind::kData));  // CP = 1
  EXPECT_EQ(g.all_groups(GroupKind::kContext).size(), 16u);

  EXPECT_EQ(g.coords(13), (RankCoords{.tp = 1, .cp = 0, .dp = 0, .pp = 3}));
  EXPECT_EQ(g.group_of(GroupKind::kPipeline, 13), (RankGroup{1, 5, 9, 13}));
  EXPECT_EQ(g.rank_in_group(GroupKind::kPipeline, 13), 3);
  EXPECT_EQ(g.group_of(GroupKind::kEmbedding, 13), (RankGroup{1, 13}));
  EXPECT_TRUE(g.group_of(GroupKind::kEmbedding, 5).empty());  // middle stage
  EXPECT_EQ(g.group_index(GroupKind::kEmbedding, 5), -1);
  EXPECT_EQ(g.rank_in_group(GroupKind::kEmbedding, 5), -1);
  EXPECT_TRUE(g.is_first_pipeline_stage(1));
  EXPECT_TRUE(g.is_last_pipeline_stage(15));
  EXPECT_FALSE(g.is_last_pipeline_stage(11));
}

// --use-tp-pp-dp-mapping: order tp-cp-ep-pp-dp, rank = tp + pp*TP + dp*TP*PP.
TEST(ParallelProcessGrid, TpPpDpMapping) {
  const ProcessGrid g = grid(16, 2, 4, 1, /*tp_pp_dp=*/true);
  EXPECT_EQ(g.order(), "tp-cp-ep-pp-dp");
  EXPECT_EQ(g.all_groups(GroupKind::kTensor),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(g.all_groups(GroupKind::kPipeline), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  EXPECT_EQ(g.all_groups(GroupKind::kData),
            (Groups{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}}));
  EXPECT_EQ(g.all_groups(GroupKind::kModel), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}}));
  EXPECT_EQ(g.all_groups(GroupKind::kEmbedding), (Groups{{0, 6}, {1, 7}, {8, 14}, {9, 15}}));
  EXPECT_EQ(g.coords(13), (RankCoords{.tp = 1, .cp = 0, .dp = 1, .pp = 2}));
}

TEST(ParallelProcessGrid, ContextParallelGroups) {
  // rank = tp + cp*2 + dp*4 + pp*8
  const ProcessGrid g = grid(16, 2, 2, 2);
  EXPECT_EQ(g.dp(), 2);
  EXPECT_EQ(g.group_of(GroupKind::kContext, 0), (RankGroup{0, 2}));
  EXPECT_EQ(g.group_of(GroupKind::kData, 0), (RankGroup{0, 4}));
  EXPECT_EQ(g.group_of(GroupKind::kDataContext, 0), (RankGroup{0, 2, 4, 6}));
  EXPECT_EQ(g.group_of(GroupKind::kTensorContext, 5), (RankGroup{4, 5, 6, 7}));
  EXPECT_EQ(g.group_of(GroupKind::kTensorData, 2), (RankGroup{2, 3, 6, 7}));
  EXPECT_EQ(g.group_of(GroupKind::kTensorDataContext, 9), (RankGroup{8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(g.group_of(GroupKind::kModel, 3), (RankGroup{2, 3, 10, 11}));
  EXPECT_EQ(g.coords(11), (RankCoords{.tp = 1, .cp = 1, .dp = 0, .pp = 1}));
}

TEST(ParallelProcessGrid, ExpertGroups) {
  // Expert generator: tp=ETP=1, ep=2, dp=8/(1*2*1)=4, rank = ep + edp*2.
  const ProcessGrid g = grid(8, 2, 1, 1, false, /*ep=*/2, /*etp=*/1);
  EXPECT_EQ(g.expert_dp(), 4);
  EXPECT_EQ(g.all_groups(GroupKind::kExpert), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(g.all_groups(GroupKind::kExpertData), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(g.all_groups(GroupKind::kExpertTensor).size(), 8u);
  EXPECT_EQ(g.expert_coords(5), (ExpertRankCoords{.tp = 0, .ep = 1, .dp = 2, .pp = 0}));
  // ETP unset = TP (Megatron's None): tp-ep groups of 4 ranks.
  const ProcessGrid h = grid(8, 2, 1, 1, false, 2);
  EXPECT_EQ(h.expert_tp(), 2);
  EXPECT_EQ(h.all_groups(GroupKind::kExpertTensorModel), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
}

// Expert groups written out by hand from Megatron-LM's RankGenerator
// (parallel_state.py: order tp-cp-ep-dp-pp, expert generator tp=ETP, ep=EP,
// cp=1, dp=world/(ETP*EP*PP), pp=PP; generate_masked_orthogonal_rank_groups:
// a group varies its masked dims, first fastest, from the base given by the
// group index over the unmasked dims, first fastest).
TEST(ParallelProcessGrid, ExpertGroupsMatchMegatronsGenerator) {
  // 16 ranks, TP 2, PP 2, EP 2, ETP 1: expert strides tp 1, ep 1, dp 2, pp 8; EDP 4.
  const ProcessGrid a = grid(16, 2, 2, 1, false, 2, 1);
  EXPECT_EQ(a.expert_dp(), 4);
  EXPECT_EQ(a.all_groups(GroupKind::kExpert),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(a.all_groups(GroupKind::kExpertData),
            (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  EXPECT_EQ(a.all_groups(GroupKind::kExpertTensor).size(), 16u);
  EXPECT_EQ(a.all_groups(GroupKind::kExpertTensorModel), a.all_groups(GroupKind::kExpert));
  EXPECT_EQ(a.all_groups(GroupKind::kExpertTensorModelPipeline),
            (Groups{{0, 1, 8, 9}, {2, 3, 10, 11}, {4, 5, 12, 13}, {6, 7, 14, 15}}));
  EXPECT_EQ(a.all_groups(GroupKind::kPipeline)[1], (RankGroup{1, 9}));
  // 8 ranks, TP 2, EP 4, ETP 2: strides tp 1, ep 2; EDP 1.
  const ProcessGrid b = grid(8, 2, 1, 1, false, 4, 2);
  EXPECT_EQ(b.all_groups(GroupKind::kExpert), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(b.all_groups(GroupKind::kExpertTensor), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(b.all_groups(GroupKind::kExpertTensorModel), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(b.all_groups(GroupKind::kExpertData), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  // 8 ranks, TP 2, CP 2, EP 2, ETP 1: the expert DP spans what the dense grid
  // calls CP and DP, so it equals the dense dp-cp group.
  const ProcessGrid c = grid(8, 2, 1, 2, false, 2, 1);
  EXPECT_EQ(c.all_groups(GroupKind::kExpertData), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(c.all_groups(GroupKind::kDataContext), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(c.all_groups(GroupKind::kExpert), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  // 12 ranks, PP 3, EP 2: strides ep 1, dp 2, pp 4; EDP 2.
  const ProcessGrid d = grid(12, 1, 3, 1, false, 2, 1);
  EXPECT_EQ(d.all_groups(GroupKind::kExpertData), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}}));
  EXPECT_EQ(d.all_groups(GroupKind::kExpertTensorModelPipeline), (Groups{{0, 1, 4, 5, 8, 9}, {2, 3, 6, 7, 10, 11}}));
  EXPECT_EQ(d.expert_coords(7), (ExpertRankCoords{.tp = 0, .ep = 1, .dp = 1, .pp = 1}));
}

// For every kind, two ranks share a group exactly when they agree on every
// coordinate the kind does not span; groups list ranks with tp fastest.
TEST(ParallelProcessGrid, GroupsAreOrthogonalSlicesOfTheGrid) {
  struct Case {
    int world, tp, pp, cp;
    bool tp_pp_dp;
  };
  for (const Case& k :
       {Case{8, 2, 2, 1, false}, Case{8, 2, 2, 1, true}, Case{24, 2, 3, 2, false}, Case{24, 2, 3, 1, true},
        Case{8, 2, 1, 2, true}, Case{12, 1, 3, 1, false}, Case{6, 3, 1, 1, true}}) {
    const ProcessGrid g = grid(k.world, k.tp, k.pp, k.cp, k.tp_pp_dp);
    for (int r = 0; r < k.world; ++r) {
      const RankCoords c = g.coords(r);
      EXPECT_EQ(g.rank_of(c), r);
      const int expected = k.tp_pp_dp ? c.tp + k.tp * (c.cp + k.cp * (c.pp + k.pp * c.dp))
                                      : c.tp + k.tp * (c.cp + k.cp * (c.dp + g.dp() * c.pp));
      EXPECT_EQ(expected, r);
    }
    struct Span {
      GroupKind kind;
      bool tp, cp, dp, pp;
    };
    for (const Span& s : {Span{GroupKind::kTensor, 1, 0, 0, 0}, Span{GroupKind::kContext, 0, 1, 0, 0},
                          Span{GroupKind::kData, 0, 0, 1, 0}, Span{GroupKind::kPipeline, 0, 0, 0, 1},
                          Span{GroupKind::kModel, 1, 0, 0, 1}, Span{GroupKind::kDataContext, 0, 1, 1, 0},
                          Span{GroupKind::kTensorContext, 1, 1, 0, 0}, Span{GroupKind::kTensorData, 1, 0, 1, 0},
                          Span{GroupKind::kTensorDataContext, 1, 1, 1, 0}}) {
      std::set<int> seen;
      for (const RankGroup& members : g.all_groups(s.kind)) {
        for (size_t i = 0; i < members.size(); ++i) {
          EXPECT_TRUE(seen.insert(members[i]).second) << "rank in two groups";
          if (i > 0) {
            EXPECT_LT(members[i - 1], members[i]);
          }
          const RankCoords a = g.coords(members[0]), b = g.coords(members[i]);
          EXPECT_TRUE((s.tp || a.tp == b.tp) && (s.cp || a.cp == b.cp) && (s.dp || a.dp == b.dp) &&
                      (s.pp || a.pp == b.pp))
              << group_kind_name(s.kind) << " " << rank_group_str(members);
        }
        const int span = (s.tp ? k.tp : 1) * (s.cp ? k.cp : 1) * (s.dp ? g.dp() : 1) * (s.pp ? k.pp : 1);
        EXPECT_EQ(static_cast<int>(members.size()), span) << group_kind_name(s.kind);
      }
      EXPECT_EQ(static_cast<int>(seen.size()), k.world) << group_kind_name(s.kind) << " must cover the world";
    }
  }
}

TEST(ParallelProcessGrid, SingleRank) {
  const ProcessGrid g = grid(1, 1, 1);
  for (int k = 0; k < kGroupKindCount; ++k) {
    EXPECT_EQ(g.group_of(static_cast<GroupKind>(k), 0), (RankGroup{0})) << group_kind_name(static_cast<GroupKind>(k));
  }
}

TEST(ParallelProcessGrid, MegatronErrorMessages) {
  EXPECT_EQ(config_error(6, 4, 1), "world_size (6) is not divisible by 4");
  EXPECT_EQ(config_error(8, 2, 2, 3), "world_size (8) is not divisible by 12");
  EXPECT_EQ(config_error(4, 8, 1), "world_size (4) is not divisible by 8");
  EXPECT_EQ(config_error(8, 1, 1, 1, false, 3),
            "world_size (8) is not divisible by expert_tensor_model_pipeline_parallel "
            "size (3)");
  EXPECT_EQ(config_error(8, 2, 2, 1, true, 1, 1),
            "When not using pp-last rank ordering, the data parallel size of the attention and moe layers must be the "
            "same");
  // Megatron's expert generator folds CP into expert DP, so CP > 1 with the
  // tp-pp-dp order and PP > 1 is refused even for a dense model.
  EXPECT_EQ(config_error(8, 2, 2, 2, true),
            "When not using pp-last rank ordering, the data parallel size of the attention and moe layers must be the "
            "same");
  EXPECT_EQ(config_error(8, 0, 1), "tensor_model_parallel_size must be a positive integer, got 0");
  EXPECT_EQ(config_error(0, 1, 1), "world_size must be a positive integer, got 0");
  try {
    grid(6, 4, 1);
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.code(), ExitCode::kConfig);
    EXPECT_NE(e.hint().find("tensor_model_parallel_size (4)"), std::string::npos) << e.hint();
  }
}

TEST(ParallelProcessGrid, RankOutOfRangeIsABug) {
  const ProcessGrid g = grid(4, 2, 2);
  EXPECT_THROW(g.coords(4), Error);
  EXPECT_THROW(g.group_of(GroupKind::kTensor, -1), Error);
  EXPECT_THROW(g.rank_of(RankCoords{.tp = 2}), Error);
}

TEST(ParallelProcessGrid, DescribeListsEveryKind) {
  const std::string d = grid(4, 2, 2).describe();
  EXPECT_NE(d.find("world 4 = TP 2 x CP 1 x DP 1 x PP 2"), std::string::npos) << d;
  EXPECT_NE(d.find("  tp: [[0, 1], [2, 3]]"), std::string::npos) << d;
  EXPECT_NE(d.find("  pp: [[0, 2], [1, 3]]"), std::string::npos) << d;
  EXPECT_NE(d.find("  embd: [[0, 2], [1, 3]]"), std::string::npos) << d;
}

}  // namespace
}  // namespace mtrain::parallel
