// SimComm: the Comm conformance suite with ranks as threads, group
// construction from a ProcessGrid, and the failure modes the simulator turns
// into errors (mismatched collectives, deadlocks, wrong message sizes).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "comm_conformance.h"
#include "common/errors.h"
#include "parallel/sim_comm.h"

namespace mtrain::parallel {
namespace {

std::string run_error(SimWorld& world, const std::function<void(int)>& body) {
  try {
    world.run(body);
  } catch (const DistributedError& e) {
    return e.what();
  }
  return "(no error)";
}

class ParallelSimCommConformance : public ::testing::TestWithParam<int> {};

TEST_P(ParallelSimCommConformance, WorldComm) {
  SimWorld world(GetParam());
  world.run([&](int rank) {
    auto comm = world.make_world_comm(rank);
    testing::run_comm_conformance(*comm);
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, ParallelSimCommConformance, ::testing::Values(1, 2, 3, 4));

// The conformance data really is order-sensitive: a reduction in another
// order would give other bits, so the bitwise checks can fail.
TEST(ParallelSimComm, TestDataIsOrderSensitive) {
  int64_t differ = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    float forward = 0, backward = 0;
    for (int k = 0; k < 4; ++k) forward += testing::test_value<float>(1, k, i);
    for (int k = 3; k >= 0; --k) backward += testing::test_value<float>(1, k, i);
    differ += forward != backward;
  }
  EXPECT_GT(differ, 50);
}

ProcessGrid make_grid(int world, int tp, int pp, int cp, bool tp_pp_dp, int ep = 1, int etp = 0) {
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

TEST(ParallelSimComm, GroupsMatchProcessGrid) {
  for (bool mapping : {false, true}) {
    for (const ProcessGrid& grid :
         {make_grid(4, 2, 2, 1, mapping), make_grid(8, 2, 2, 1, mapping), make_grid(8, 2, 1, 2, mapping),
          make_grid(4, 1, 4, 1, mapping), make_grid(8, 2, 2, 1, mapping, 2, 1), make_grid(8, 2, 1, 1, mapping, 4, 2)}) {
      SimWorld world(grid.world_size());
      world.run([&](int rank) {
        ParallelState ps = make_sim_parallel_state(grid, world, rank);
        EXPECT_EQ(ps.coords(), grid.coords(rank));
        testing::check_groups_match_grid(ps);
      });
    }
  }
}

// Collectives on different groups of one rank do not interfere: TP reduces
// within pairs while DP reduces across them.
TEST(ParallelSimComm, IndependentGroupsReduceIndependently) {
  const ProcessGrid grid = make_grid(8, 2, 2, 1, false);
  SimWorld world(8);
  world.run([&](int rank) {
    ParallelState ps = make_sim_parallel_state(grid, world, rank);
    double x = rank;
    ps.tp().all_reduce_sum(&x, 1);
    double expected = 0;
    for (int r : grid.group_of(GroupKind::kTensor, rank)) expected += r;
    EXPECT_EQ(x, expected);
    int64_t y = 1;
    ps.dp().all_reduce(&y, 1);
    ps.pp().all_reduce(&y, 1);
    EXPECT_EQ(y, grid.dp() * grid.pp());
  });
}

// Counts that disagree between sender and receiver fail on every rank with
// the pair named (MPI would truncate or leave the block half written).
TEST(ParallelSimComm, AllToAllCountMismatchIsAnError) {
  SimWorld world(3, SimWorldOptions{.timeout_seconds = 5});
  std::atomic<int> failed{0};
  world.run([&](int rank) {
    auto comm = world.make_world_comm(rank);
    std::vector<int64_t> counts{1, 1, 1}, displs{0, 1, 2}, recv = counts, recv_displs = displs;
    if (rank == 2) recv = {2, 1, 1}, recv_displs = {0, 2, 3};  // rank 0 sends one
    std::vector<float> in(3, 1.0f), out(4, 0.0f);
    try {
      comm->all_to_all_v(in.data(), counts, displs, out.data(), recv, recv_displs);
    } catch (const DistributedError& e) {
      EXPECT_STREQ(e.what(), "comm 'world': all_to_all_v mismatch: rank 0 sends 1 float32 to rank 2, which expects 2");
      failed.fetch_add(1);
    }
  });
  EXPECT_EQ(failed.load(), 3);
}

// An MoE dispatch pattern on the EP groups of an EP 2 x expert-DP 2 grid:
// each rank sends rank-tagged tokens to its EP peer, and the expert-DP sum
// runs over the other axis.
TEST(ParallelSimComm, ExpertGroupsExchangeIndependently) {
  const ProcessGrid grid = make_grid(4, 1, 1, 1, false, 2, 1);
  SimWorld world(4);
  world.run([&](int rank) {
    ParallelState ps = make_sim_parallel_state(grid, world, rank);
    const std::vector<int64_t> counts{1, 1}, displs{0, 1};
    const int32_t in[2] = {10 * rank + 0, 10 * rank + 1};
    int32_t out[2] = {-1, -1};
    ps.ep().all_to_all_v(in, counts, displs, out, counts, displs);
    const RankGroup& ep = grid.group_of(GroupKind::kExpert, rank);
    const int me = ps.ep().rank();
    EXPECT_EQ(out[0], 10 * ep[0] + me);
    EXPECT_EQ(out[1], 10 * ep[1] + me);
    int64_t sum = rank;
    ps.expert_dp().all_reduce(&sum, 1);
    int64_t expected = 0;
    for (int r : grid.group_of(GroupKind::kExpertData, rank)) expected += r;
    EXPECT_EQ(sum, expected);
  });
}

TEST(ParallelSimComm, BarrierSynchronises) {
  SimWorld world(4);
  std::atomic<int> arrived{0};
  world.run([&](int rank) {
    auto comm = world.make_world_comm(rank);
    if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    arrived.fetch_add(1);
    comm->barrier();
    EXPECT_EQ(arrived.load(), 4);
  });
}

TEST(ParallelSimComm, EachCreationIsAFreshCommunicator) {
  SimWorld world(2, SimWorldOptions{.timeout_seconds = 5, .synchronous_send = false});
  world.run([&](int rank) {
    auto a = world.make_comm("pair", {0, 1}, rank);
    auto b = world.make_comm("pair", {0, 1}, rank);  // same members, another context
    int32_t v = -1;
    if (rank == 0) {
      const int32_t on_b = 2, on_a = 1;
      b->send(&on_b, 1, 1, 0);
      a->send(&on_a, 1, 1, 0);
    } else {
      a->recv(&v, 1, 0, 0);  // not b's earlier message
      EXPECT_EQ(v, 1);
      b->recv(&v, 1, 0, 0);
      EXPECT_EQ(v, 2);
    }
  });
}

TEST(ParallelSimComm, MismatchedCollectivesFailOnEveryRank) {
  SimWorld world(2, SimWorldOptions{.timeout_seconds = 5});
  std::atomic<int> failures{0};
  const std::string error = run_error(world, [&](int rank) {
    auto comm = world.make_world_comm(rank);
    std::vector<float> x(5, 1.0f);
    try {
      if (rank == 0) comm->all_reduce_sum(x.data(), 4);
      if (rank == 1) comm->all_gather(x.data(), x.data(), 2);
    } catch (const DistributedError&) {
      failures.fetch_add(1);
      throw;
    }
  });
  EXPECT_EQ(error,
            "comm 'world': collective mismatch: rank 0 called all_reduce(float32 x 4, sum) but rank 1 called "
            "all_gather(float32 x 2)");
  EXPECT_EQ(failures.load(), 2);
}

// Non-blocking collectives are matched like blocking ones: by their place
// in each rank's sequence of collectives on the communicator.
TEST(ParallelSimComm, MismatchedNonBlockingCollectivesFailOnWait) {
  SimWorld world(2, SimWorldOptions{.timeout_seconds = 5});
  std::atomic<int> failures{0};
  const std::string error = run_error(world, [&](int rank) {
    auto comm = world.make_world_comm(rank);
    std::vector<float> x(5, 1.0f);
    CollectiveRequest request = comm->start_all_reduce_sum(x.data(), rank == 0 ? 4 : 5);
    try {
      request.wait();
    } catch (const DistributedError&) {
      failures.fetch_add(1);
      throw;
    }
  });
  EXPECT_EQ(error,
            "comm 'world': collective mismatch: rank 0 called start_all_reduce(float32 x 4, sum) but rank 1 called "
            "start_all_reduce(float32 x 5, sum)");
  EXPECT_EQ(failures.load(), 2);
}

// Under MPI a non-blocking collective on one rank would match a blocking one
// on another; the simulator reports it at once, whichever rank comes first.
TEST(ParallelSimComm, NonBlockingAgainstBlockingIsAMismatch) {
  for (int late_rank : {0, 1}) {
    SimWorld world(2, SimWorldOptions{.timeout_seconds = 30});
    const auto start = std::chrono::steady_clock::now();
    const std::string error = run_error(world, [&](int rank) {
      auto comm = world.make_world_comm(rank);
      if (rank == late_rank) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::vector<float> x(4, 1.0f);
      if (rank == 0) comm->start_all_reduce_sum(x.data(), 4).wait();
      if (rank == 1) comm->all_reduce_sum(x.data(), 4);
    });
    EXPECT_EQ(error,
              "comm 'world': collective mismatch: rank 0 called start_all_reduce(float32 x 4, sum) but rank 1 called "
              "all_reduce(float32 x 4, sum)")
        << "late rank " << late_rank;
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  }
}

TEST(ParallelSimComm, UnmatchedNonBlockingCollectiveTimesOut) {
  SimWorld world(2, SimWorldOptions{.timeout_seconds = 0.2});
  const std::string error = run_error(world, [&](int rank) {
    auto comm = world.make_world_comm(rank);
    std::vector<float> x(4, 1.0f);
    if (rank == 0) comm->start_all_reduce_sum(x.data(), 4).wait();
  });
  EXPECT_NE(error.find("rank 0 waited 0.2 s in start_all_reduce(float32 x 4, sum) (1 of 2 ranks started it)"),
            std::string::npos)
      << error;
}

// A request completes once every rank has started the collective: rank 0
// waits while rank 1 has not waited yet (it is still computing).
TEST(ParallelSimComm, RequestCompletesWithoutThePeersWait) {
  SimWorld world(2, SimWorldOptions{.timeout_seconds = 5});
  std::atomic<bool> rank0_done{false};
  world.run([&](int rank) {
    auto comm = world.make_world_comm(rank);
    std::vector<float> x(3, 1.0f + rank);
    CollectiveRequest request = comm->start_all_reduce_sum(x.data(), 3);
    if (rank == 0) {
      request.wait();
      rank0_done = true;
    } else {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
      while (!rank0_done && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
      EXPECT_TRUE(rank0_done.load());
      request.wait();
    }
    EXPECT_EQ(x[1], 3.0f);
  });
}

// Both ranks send first: fine with eager buffering, a deadlock with
// synchronous sends, which the simulator reports instead of hanging.
TEST(ParallelSimComm, UnsafeSendOrderIsReportedAsDeadlock) {
  auto exchange = [](SimWorld& world) {
    return [&world](int rank) {
      auto comm = world.make_world_comm(rank);
      float out = static_cast<float>(rank), in = -1;
      comm->send(&out, 1, 1 - rank, 0);
      comm->recv(&in, 1, 1 - rank, 0);
      EXPECT_EQ(in, static_cast<float>(1 - rank));
    };
  };
  SimWorld buffered(2, SimWorldOptions{.timeout_seconds = 5, .synchronous_send = false});
  EXPECT_EQ(run_error(buffered, exchange(buffered)), "(no error)");
  SimWorld strict(2, SimWorldOptions{.timeout_seconds = 0.2});
  const std::string error = run_error(strict, exchange(strict));
  EXPECT_NE(error.find("waited 0.2 s in send to rank"), std::string::npos) << error;
  EXPECT_NE(error.find("deadlock"), std::string::npos) << error;
  // send_recv is the safe form of the same exchange.
  SimWorld safe(2, SimWorldOptions{.timeout_seconds = 5});
  safe.run([&](int rank) {
    auto comm = safe.make_world_comm(rank);
    float out = static_cast<float>(rank), in = -1;
    comm->send_recv(&out, 1, 1 - rank, &in, 1, 1 - rank, 0);
    EXPECT_EQ(in, static_cast<float>(1 - rank));
  });
}

// A synchronous-mode isend completes once the receiver has the message; a
// buffered one at once. Either way the sender never blocks in isend.
TEST(ParallelSimComm, IsendCompletesWhenReceived) {
  for (bool synchronous : {true, false}) {
    SimWorld world(2, SimWorldOptions{.timeout_seconds = 5, .synchronous_send = synchronous});
    world.run([&](int rank) {
      auto comm = world.make_world_comm(rank);
      float v = 3.5f;
      if (rank == 0) {
        SendRequest request = comm->isend(&v, 1, 1, 5);
        EXPECT_EQ(request.done(), !synchronous);
        comm->barrier();  // rank 1 receives only after this
        request.wait();
        EXPECT_TRUE(request.done());
      } else {
        comm->barrier();
        comm->recv(&v, 1, 0, 5);
        EXPECT_EQ(v, 3.5f);
      }
    });
  }
}

TEST(ParallelSimComm, UnreceivedIsendIsReportedOnWait) {
  SimWorld world(2, SimWorldOptions{.timeout_seconds = 0.2});
  const std::string error = run_error(world, [&](int rank) {
    auto comm = world.make_world_comm(rank);
    const float v = 1;
    if (rank == 0) comm->isend(&v, 1, 1, 5).wait();
  });
  EXPECT_NE(error.find("rank 0 waited 0.2 s in isend to rank 1 (tag 5)"), std::string::npos) << error;
}

TEST(ParallelSimComm, WrongMessageSizeIsAnError) {
  SimWorld world(2, SimWorldOptions{.timeout_seconds = 5});
  const std::string error = run_error(world, [&](int rank) {
    auto comm = world.make_world_comm(rank);
    float x[4] = {};
    if (rank == 0) comm->send(x, 4, 1, 9);
    if (rank == 1) comm->recv(x, 3, 0, 9);
  });
  EXPECT_EQ(error, "comm 'world': rank 1 expected 3 float32 from rank 0 (tag 9) but the message holds 4 float32");
}

// A rank that fails outside any collective takes the world down: the others
// stop at their next wait, and run() reports the root cause.
TEST(ParallelSimComm, FailingRankAbortsTheOthers) {
  SimWorld world(3, SimWorldOptions{.timeout_seconds = 30});
  const auto start = std::chrono::steady_clock::now();
  std::string error = "(no error)";
  try {
    world.run([&](int rank) {
      auto comm = world.make_world_comm(rank);
      if (rank == 2) throw DataError("rank 2 could not read its shard");
      comm->barrier();
    });
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_EQ(error, "rank 2 could not read its shard");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  EXPECT_TRUE(world.aborted());
  EXPECT_NE(world.abort_reason().find("rank 2 failed"), std::string::npos);
}

TEST(ParallelSimComm, GridAndWorldSizesMustAgree) {
  SimWorld world(2);
  EXPECT_THROW(make_sim_parallel_state(make_grid(4, 2, 2, 1, false), world, 0), DistributedError);
  EXPECT_THROW(world.make_comm("x", {0, 1}, 3), Error);
}

}  // namespace
}  // namespace mtrain::parallel
