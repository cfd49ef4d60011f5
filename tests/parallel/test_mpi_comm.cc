// MpiComm under mpirun (label mpi): the Comm conformance suite on the world
// and on every group kind, group construction from a ProcessGrid, and the
// deterministic all-reduce. Every rank runs every test; failures print with
// their rank, and the exit code is the worst over all ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "comm_conformance.h"
#include "common/errors.h"
#include "parallel/grad_buckets.h"
#include "parallel/mpi_comm.h"
#include "parallel/pipeline_schedule.h"
#include "pipeline_toy.h"

namespace mtrain::parallel {
namespace {

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

ProcessGrid make_grid(int tp, int pp, int cp, bool tp_pp_dp, int ep = 1, int etp = 0) {
  ProcessGridConfig c;
  c.world_size = world_size();
  c.tensor_model_parallel_size = tp;
  c.pipeline_model_parallel_size = pp;
  c.context_parallel_size = cp;
  c.use_tp_pp_dp_mapping = tp_pp_dp;
  c.expert_model_parallel_size = ep;
  c.expert_tensor_parallel_size = etp;
  return ProcessGrid(c);
}

TEST(ParallelMpiComm, WorldConformance) {
  auto world = MpiComm::duplicate(MPI_COMM_WORLD, "world");
  EXPECT_EQ(world->size(), world_size());
  testing::run_comm_conformance(*world);
}

// TP=2, PP=2 at 4 ranks (both rank orders), TP=2 x CP=2, and PP=4 (where the
// middle stages belong to no embedding group).
TEST(ParallelMpiComm, GroupsMatchProcessGrid) {
  if (world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
  for (bool mapping : {false, true}) {
    for (const ProcessGrid& grid :
         {make_grid(2, 2, 1, mapping), make_grid(2, 1, 2, mapping), make_grid(1, 4, 1, mapping),
          make_grid(1, 1, 1, mapping), make_grid(2, 1, 1, mapping, 2, 1), make_grid(1, 1, 1, mapping, 2)}) {
      ParallelState ps = make_mpi_parallel_state(grid);
      EXPECT_EQ(ps.coords(), grid.coords(ps.rank()));
      testing::check_groups_match_grid(ps);
    }
  }
}

// The conformance suite on the TP and PP communicators of a TP=2, PP=2 grid
// (on 4 ranks; on other sizes, on TP=1 and the pipeline over all ranks).
TEST(ParallelMpiComm, GroupConformance) {
  const int n = world_size();
  ParallelState ps = make_mpi_parallel_state(n == 4 ? make_grid(2, 2, 1, false) : make_grid(1, n, 1, false));
  testing::run_comm_conformance(ps.tp());
  testing::run_comm_conformance(ps.pp());
  testing::run_comm_conformance(ps.dp());
  if (n == 4) {  // the expert groups of TP 2, EP 2, ETP 1: ep pairs, expert DP over the other pair
    ParallelState moe = make_mpi_parallel_state(make_grid(2, 1, 1, false, 2, 1));
    testing::run_comm_conformance(moe.ep());
    testing::run_comm_conformance(moe.expert_dp());
  }
}

// Repeated all-reduces of the same data give the same bits (no algorithm
// switch, no dependence on arrival order), and equal the rank-order fold.
TEST(ParallelMpiComm, AllReduceIsDeterministicAcrossCalls) {
  auto world = MpiComm::duplicate(MPI_COMM_WORLD, "world");
  const int64_t n = 100003;
  std::vector<float> first;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<float> data = testing::test_values<float>(4242, world->rank(), n);
    world->all_reduce_sum(data.data(), n);
    if (rep == 0) {
      first = data;
      EXPECT_EQ(testing::count_reduce_mismatches(data.data(), 4242, world->size(), 0, n, ReduceOp::kSum), 0);
    } else {
      EXPECT_EQ(std::memcmp(first.data(), data.data(), n * sizeof(float)), 0) << "repetition " << rep;
    }
  }
}

// The observer sees MPI traffic per group with the group's name.
TEST(ParallelMpiComm, ObserverSeesGroupTraffic) {
  ParallelState ps = make_mpi_parallel_state(make_grid(1, 1, 1, false));
  std::vector<std::pair<std::string, int64_t>> seen;
  ps.set_observer([&](const CommEvent& e) { seen.emplace_back(std::string(e.group), e.bytes); });
  std::vector<float> grads(1000, 1.0f);
  ps.dp().all_reduce_sum(grads.data(), 1000, Wire::of(DType::kBF16));
  ps.tp().barrier();
  ps.set_observer(nullptr);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], (std::pair<std::string, int64_t>{"dp", 2000}));
  EXPECT_EQ(seen[1], (std::pair<std::string, int64_t>{"tp", 0}));
  EXPECT_EQ(grads[7], static_cast<float>(world_size()));
}

TEST(ParallelMpiComm, WrongWorldSizeIsReported) {
  ProcessGridConfig c;
  c.world_size = 2 * world_size();
  try {
    make_mpi_parallel_state(ProcessGrid(c));
    ADD_FAILURE() << "expected a DistributedError";
  } catch (const DistributedError& e) {
    EXPECT_EQ(std::string(e.what()), "the process grid has " + std::to_string(2 * world_size()) +
                                         " ranks but the MPI world has " + std::to_string(world_size()));
  }
}

// The pipeline schedules over MPI, every rank one stage: plain 1F1B and
// interleaved, training and evaluation, equal the sequential toy model bit
// for bit; every transfer is reported.
TEST(ParallelMpiComm, PipelineMatchesSequential) {
  auto pp = MpiComm::duplicate(MPI_COMM_WORLD, "pp");
  const int stages = pp->size(), stage = pp->rank();
  int p2p = 0;
  pp->set_observer([&](const CommEvent& e) { p2p += e.op == CommOp::kSend || e.op == CommOp::kRecv; });
  for (const auto& [chunks, microbatches] :
       {std::pair{1, stages + 3}, std::pair{2, 2 * stages}, std::pair{3, stages}}) {
    const PipelineShape shape{stages, stage, chunks, microbatches};
    const testing::ToyResult ref = testing::toy_reference(stages, chunks, microbatches);
    testing::ToyStage train(shape, /*training=*/true), eval(shape, /*training=*/false);
    p2p = 0;
    run_pipeline(*pp, shape, train.callbacks());
    const int first = stage == 0, last = stage == stages - 1;
    EXPECT_EQ(p2p, 2 * microbatches * (2 * chunks - first - last));
    run_pipeline_forward_only(*pp, shape, eval.callbacks());
    EXPECT_EQ(train.violations + eval.violations, 0);
    for (int c = 0; c < chunks; ++c) {
      const int k = c * stages + stage;
      EXPECT_EQ(train.result.da[k], ref.da[k]) << "virtual stage " << k << ", " << chunks << " chunks";
      EXPECT_EQ(train.result.db[k], ref.db[k]) << "virtual stage " << k << ", " << chunks << " chunks";
    }
    if (last) {
      EXPECT_EQ(train.result.loss, ref.loss);
      EXPECT_EQ(eval.result.loss, ref.loss);
    }
  }
}

// Overlapped DP reduction over MPI, marks in reverse order of offsets as
// backward makes them: the same bits as the blocking bucket reduction, with
// several buckets in flight at once.
TEST(ParallelMpiComm, OverlappedReductionMatchesBlocking) {
  auto dp = MpiComm::duplicate(MPI_COMM_WORLD, "dp");
  const GradBuckets buckets(100003, 8000, dp->size());
  for (bool scatter : {false, true}) {
    std::vector<float> overlapped(buckets.padded_numel(), 0.0f);
    for (int64_t i = 0; i < buckets.numel(); ++i) overlapped[i] = testing::test_value<float>(77, dp->rank(), i);
    std::vector<float> blocking = overlapped;
    OverlappedReduction reduction(buckets, *dp, overlapped.data(), scatter);
    for (int64_t end = buckets.numel(); end > 0; end -= 1237)
      reduction.mark_ready(std::max<int64_t>(0, end - 1237), end);
    EXPECT_EQ(reduction.buckets_started_early(), static_cast<int>(buckets.buckets().size()));
    reduction.finish();
    scatter ? buckets.reduce_scatter(*dp, blocking.data()) : buckets.all_reduce(*dp, blocking.data());
    EXPECT_EQ(std::memcmp(overlapped.data(), blocking.data(), blocking.size() * sizeof(float)), 0)
        << (scatter ? "reduce_scatter" : "all_reduce");
  }
}

// Prints failed assertions of ranks other than 0, prefixed with the rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed()) {
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
                   r.message());
    }
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace mtrain::parallel

int main(int argc, char** argv) {
  mtrain::parallel::MpiRuntime mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (mpi.world_rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new mtrain::parallel::RankFailurePrinter(mpi.world_rank()));
  }
  const int local = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&local, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (mpi.world_rank() == 0 && worst != local) std::fprintf(stderr, "a test failed on another rank\n");
  return worst;
}
