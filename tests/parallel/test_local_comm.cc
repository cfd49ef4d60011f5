// SelfComm (a group of one), MetaComm (shape-only) and the argument checks
// every Comm shares.
#include <gtest/gtest.h>

#include "comm_conformance.h"
#include "common/errors.h"
#include "parallel/local_comm.h"
#include "parallel/parallel_state.h"

namespace mtrain::parallel {
namespace {

TEST(ParallelLocalComm, SelfCommConformance) {
  SelfComm c("tp");
  testing::run_comm_conformance(c);
}

TEST(ParallelLocalComm, SelfCommCopiesShardsAndSelfMessages) {
  SelfComm c;
  float in[3] = {1, 2, 3}, out[3] = {0, 0, 0};
  c.reduce_scatter(in, out, 3);
  EXPECT_EQ(out[2], 3.0f);
  c.all_gather(in, out, 3);
  EXPECT_EQ(out[1], 2.0f);
  float got[3] = {};
  c.send_recv(in, 3, 0, got, 3, 0, 0);
  EXPECT_EQ(got[0], 1.0f);
  EXPECT_THROW(c.send_recv(in, 3, 0, got, 2, 0, 0), DistributedError);
}

TEST(ParallelLocalComm, MetaCommMovesNothingButReportsEverything) {
  MetaComm c("dp", 2, 8);
  EXPECT_EQ(c.rank(), 2);
  EXPECT_EQ(c.size(), 8);
  std::vector<CommEvent> events;
  c.set_observer([&](const CommEvent& e) { events.push_back(e); });
  c.all_reduce_sum(static_cast<float*>(nullptr), 1 << 20, Wire::of(DType::kBF16));
  c.reduce_scatter(static_cast<const float*>(nullptr), static_cast<float*>(nullptr), 1000);
  float untouched[2] = {5, 6};
  c.recv(untouched, 2, 3, 0);
  c.send_recv(static_cast<const float*>(nullptr), 10, 3, static_cast<float*>(nullptr), 20, 1, 4);
  SendRequest request = c.isend(static_cast<const float*>(nullptr), 6, 1, 2);
  EXPECT_TRUE(request.done());
  EXPECT_FALSE(c.moves_data());
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[4].op, CommOp::kSend);
  EXPECT_TRUE(events[4].nonblocking);
  EXPECT_EQ(events[4].bytes, 24);
  EXPECT_EQ(events[4].peer, 1);
  EXPECT_EQ(events[0].bytes, (1 << 20) * 2);
  EXPECT_EQ(events[1].bytes, 8 * 1000 * 4);
  EXPECT_EQ(events[1].elements, 8 * 1000);
  EXPECT_EQ(events[2].peer, 3);
  EXPECT_EQ(events[3].recv_bytes, 80);
  EXPECT_EQ(events[3].group, "dp");
  EXPECT_EQ(untouched[0], 5.0f);
  EXPECT_THROW(MetaComm("x", 8, 8), Error);
}

// A dry run's MoE dispatch: nothing moves, the traffic is still reported.
TEST(ParallelLocalComm, MetaCommReportsAllToAll) {
  MetaComm c("ep", 1, 4);
  std::vector<CommEvent> events;
  c.set_observer([&](const CommEvent& e) { events.push_back(e); });
  const std::vector<int64_t> send{3, 0, 5, 2}, send_at{0, 3, 3, 8}, recv{1, 0, 6, 9}, recv_at{0, 1, 1, 7};
  c.all_to_all_v(static_cast<const float*>(nullptr), send, send_at, static_cast<float*>(nullptr), recv, recv_at);
  c.all_to_all(static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr), 6);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].op, CommOp::kAllToAll);
  EXPECT_EQ(events[0].elements, 10);
  EXPECT_EQ(events[0].bytes, 40);
  EXPECT_EQ(events[0].recv_bytes, 64);
  EXPECT_EQ(events[0].group, "ep");
  EXPECT_EQ(events[1].elements, 24);
  EXPECT_EQ(events[1].bytes, 24 * 8);
  EXPECT_EQ(events[1].recv_bytes, 24 * 8);
}

// Layouts that cannot be right are refused before anything moves.
TEST(ParallelLocalComm, InvalidAllToAllLayoutsAreBugs) {
  SelfComm s("ep");
  float in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8] = {};
  const std::vector<int64_t> two{2}, zero{0}, one{1};
  s.all_to_all_v(in, two, one, out, two, zero);
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(out[1], 3.0f);
  const std::vector<int64_t> pair{1, 1};
  EXPECT_THROW(s.all_to_all_v(in, pair, pair, out, pair, pair), Error);   // one entry per rank
  EXPECT_THROW(s.all_to_all_v(in, two, zero, out, one, zero), Error);     // to itself: 2 sent, 1 expected
  EXPECT_THROW(s.all_to_all_v(in, two, zero, in + 1, two, zero), Error);  // in and out overlap
  EXPECT_THROW(s.all_to_all_v(in, std::vector<int64_t>{-1}, zero, out, two, zero), Error);       // negative count
  EXPECT_THROW(s.all_to_all_v(static_cast<float*>(nullptr), two, zero, out, two, zero), Error);  // null input
  MetaComm m("ep", 0, 2);
  EXPECT_THROW(
      m.all_to_all_v(in, pair, std::vector<int64_t>{0, 1}, out, std::vector<int64_t>{1, 2}, std::vector<int64_t>{0, 0}),
      Error);  // receive blocks overlap
  try {
    s.all_to_all_v(in, two, zero, out, one, zero);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kInternal);
    EXPECT_STREQ(e.what(), "comm 'ep': rank 0 all_to_all_v sends 2 elements to itself but expects 1");
  }
}

TEST(ParallelLocalComm, InvalidCallsAreBugs) {
  MetaComm c("pp", 1, 4);
  float x[4] = {};
  EXPECT_THROW(c.send(x, 4, 4, 0), Error);                       // peer outside the group
  EXPECT_THROW(c.send(x, 4, 1, 0), Error);                       // to itself
  EXPECT_THROW(c.recv(x, -1, 0, 0), Error);                      // negative count
  EXPECT_THROW(c.send(x, 4, 0, Comm::kMaxTag + 1), Error);       // tag
  EXPECT_THROW(c.broadcast(x, 4, -1), Error);                    // root
  EXPECT_THROW(static_cast<void>(c.isend(x, 4, 1, 0)), Error);   // isend to itself
  EXPECT_THROW(static_cast<void>(c.isend(x, 4, 2, -1)), Error);  // tag
  SelfComm s;
  EXPECT_TRUE(s.moves_data());
  EXPECT_THROW(static_cast<void>(s.isend(x, 4, 0, 0)), Error);             // a group of one has no peer
  EXPECT_THROW(s.all_reduce_sum(static_cast<float*>(nullptr), 3), Error);  // null buffer that would be touched
  try {
    c.send(x, 4, 1, 0);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kInternal);
    EXPECT_STREQ(e.what(), "comm 'pp': rank 1 send to itself would block forever");
  }
}

TEST(ParallelLocalComm, SelfParallelState) {
  ParallelState ps = make_self_parallel_state(ProcessGrid(ProcessGridConfig{}));
  EXPECT_EQ(ps.world().size(), 1);
  EXPECT_EQ(ps.tp().name(), "tp");
  EXPECT_EQ(ps.dp_cp().name(), "dp-cp");
  testing::check_groups_match_grid(ps);
  ProcessGridConfig two;
  two.world_size = 2;
  EXPECT_THROW(make_self_parallel_state(ProcessGrid(two)), DistributedError);
}

// A dry run builds any rank's state without other processes.
TEST(ParallelLocalComm, MetaParallelStateForEveryRank) {
  ProcessGridConfig cfg;
  cfg.world_size = 16;
  cfg.tensor_model_parallel_size = 2;
  cfg.pipeline_model_parallel_size = 4;
  const ProcessGrid grid(cfg);
  for (int r = 0; r < 16; ++r) {
    ParallelState ps = make_meta_parallel_state(grid, r);
    EXPECT_EQ(ps.tp().size(), 2);
    EXPECT_EQ(ps.pp().size(), 4);
    EXPECT_EQ(ps.dp().size(), 2);
    EXPECT_EQ(ps.pp().rank(), grid.coords(r).pp);
    EXPECT_EQ(ps.in_group(GroupKind::kEmbedding), ps.is_first_pipeline_stage() || ps.is_last_pipeline_stage());
    if (!ps.in_group(GroupKind::kEmbedding)) {
      EXPECT_THROW(ps.group(GroupKind::kEmbedding), Error);
    }
  }
}

// Every rank of a dry run gets the expert generator's communicators.
TEST(ParallelLocalComm, MetaParallelStateHasExpertGroups) {
  ProcessGridConfig cfg;
  cfg.world_size = 16;
  cfg.tensor_model_parallel_size = 2;
  cfg.pipeline_model_parallel_size = 2;
  cfg.expert_model_parallel_size = 2;
  cfg.expert_tensor_parallel_size = 1;
  const ProcessGrid grid(cfg);
  for (int r = 0; r < 16; ++r) {
    ParallelState ps = make_meta_parallel_state(grid, r);
    const ExpertRankCoords e = grid.expert_coords(r);
    EXPECT_EQ(ps.ep().name(), "ep");
    EXPECT_EQ(ps.ep().size(), 2);
    EXPECT_EQ(ps.ep().rank(), e.ep);
    EXPECT_EQ(ps.expert_tp().size(), 1);
    EXPECT_EQ(ps.expert_dp().size(), 4);
    EXPECT_EQ(ps.expert_dp().rank(), e.dp);
    EXPECT_EQ(ps.tp_ep().size(), 2);
    EXPECT_EQ(ps.tp_ep_pp().size(), 4);
    EXPECT_EQ(ps.expert_coords(), e);
  }
  ParallelState self = make_self_parallel_state(ProcessGrid(ProcessGridConfig{}));
  EXPECT_EQ(self.expert_dp().name(), "expt-dp");
  EXPECT_EQ(self.tp_ep_pp().size(), 1);
  testing::check_groups_match_grid(self);
}

}  // namespace
}  // namespace mtrain::parallel
