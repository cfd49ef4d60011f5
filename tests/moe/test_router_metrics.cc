// The router-loss log values: Megatron's tracker reductions (moe_logging.py)
// worked out by hand on simulated rank grids.
#include <gtest/gtest.h>

#include "moe/router_metrics.h"
#include "parallel/local_comm.h"
#include "parallel/sim_comm.h"

namespace mtrain::moe {
namespace {

using Report = std::vector<std::pair<std::string, double>>;

// 4 ranks: token group (TP×CP) of 2 × DP 2, global rank g = t + 2 d; 3
// layers, MoE layers 1 and 2; 2 micro-batches. Rank g records, for layer l
// and micro-batch mb, load_balancing_loss (g + 1) l + mb and z_loss
// 10 g + l + mb.
// load_balancing_loss: per rank and layer, summed over mb: 2 (g + 1) l + 1;
// summed over the token group: 6 l + 2 (d = 0), 14 l + 2 (d = 1); averaged
// over DP: 10 l + 2; / 2 micro-batches: 5 l + 1 -> layers 1, 2: 6, 11 ->
// mean over the 2 MoE layers 8.5.
// z_loss: per rank 20 g + 2 l + 1; averaged over the 4 ranks 31 + 2 l (DP
// average unchanged); / 2: 15.5 + l -> 16.5, 17.5 -> 17.
TEST(RouterLossTracker, MegatronReductionsOverTokenGroupAndDataParallel) {
  parallel::SimWorld world(4);
  std::vector<Report> reports(4);
  world.run([&](int g) {
    const int t = g % 2, d = g / 2;
    auto token_group = world.make_comm("tp_cp", {2 * d, 2 * d + 1}, g);
    auto dp = world.make_comm("dp", {t, t + 2}, g);
    auto all = world.make_comm("tp_dp_cp", {0, 1, 2, 3}, g);
    parallel::SelfComm pp("pp");
    RouterLossTracker tracker(3);
    for (int mb = 0; mb < 2; ++mb)
      for (int l = 1; l <= 2; ++l)
        tracker.record(l, {.load_balancing_loss = (g + 1.0) * l + mb, .z_loss = 10.0 * g + l + mb});
    reports[g] = tracker.report(2, 2, pp, *token_group, *all, *dp);
    // Cleared: a second report has nothing recorded.
    EXPECT_TRUE(tracker.report(2, 2, pp, *token_group, *all, *dp).empty());
  });
  for (int g = 0; g < 4; ++g) {
    // Megatron's log line order: load_balancing_loss before z_loss.
    ASSERT_EQ(reports[g].size(), 2u) << g;
    EXPECT_EQ(reports[g][0].first, "load_balancing_loss");
    EXPECT_DOUBLE_EQ(reports[g][0].second, 8.5);
    EXPECT_EQ(reports[g][1].first, "z_loss");
    EXPECT_DOUBLE_EQ(reports[g][1].second, 17.0);
  }
}

// Two pipeline stages, one MoE layer each: stage 0 records 1.0 for layer 0,
// stage 1 records 3.0 for layer 1 (seq_aux_loss); both report (1 + 3) / 2.
TEST(RouterLossTracker, PipelineStagesGatherTheirLayers) {
  parallel::SimWorld world(2);
  std::vector<Report> reports(2);
  world.run([&](int g) {
    auto pp = world.make_comm("pp", {0, 1}, g);
    parallel::SelfComm tok("tp_cp"), all("tp_dp_cp"), dp("dp");
    RouterLossTracker tracker(2);
    tracker.record(g, {.seq_load_balancing_loss = g == 0 ? 1.0 : 3.0});
    reports[g] = tracker.report(1, 2, *pp, tok, all, dp);
  });
  for (int g = 0; g < 2; ++g) EXPECT_EQ(reports[g], (Report{{"seq_load_balancing_loss", 2.0}})) << g;
}

}  // namespace
}  // namespace mtrain::moe
