// GradBuckets: the bucket layout (sizes, order, padding, owned chunks), the
// bucketed DP all-reduce against a rank-order sum, and the reduce_scatter +
// all_gather round trip of the distributed optimizer, on SimWorld DP 2, 3, 4.
// OverlappedReduction: marks as backward makes them (reverse order of
// offsets), in random chunks, all at once or none give the blocking
// reduction's bits; buckets start as soon as they are complete.
// OverlappedParamGather: the distributed optimizer's gather, non-blocking,
// gives the blocking gather's bits and waits in forward order.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "comm_test_data.h"
#include "common/errors.h"
#include "common/rng.h"
#include "parallel/grad_buckets.h"
#include "parallel/local_comm.h"
#include "parallel/param_gather.h"
#include "parallel/sim_comm.h"

namespace mtrain::parallel {
namespace {

// Every bucket is a multiple of dp, they tile [0, padded) from the end in
// order, and the chunks owned by ranks 0..dp-1 tile every bucket once.
void expect_consistent_layout(const GradBuckets& b) {
  const int dp = b.dp_size();
  EXPECT_GE(b.padded_numel(), b.numel());
  EXPECT_LT(b.padded_numel() - b.numel(), dp);
  EXPECT_EQ(b.padded_numel() % dp, 0);
  int64_t end = b.padded_numel();
  for (const Interval& iv : b.buckets()) {
    EXPECT_EQ(iv.end, end) << "buckets run from the end of the buffer to the start, without gaps";
    EXPECT_GT(iv.size(), 0);
    EXPECT_LE(iv.size(), b.bucket_elems());
    EXPECT_LT(iv.size(), int64_t{1} << 31);
    EXPECT_EQ(iv.size() % dp, 0);
    end = iv.begin;
  }
  EXPECT_EQ(end, 0);
  std::vector<int> owner(b.padded_numel(), -1);
  for (int r = 0; r < dp; ++r) {
    const std::vector<Interval> owned = b.owned(r);
    ASSERT_EQ(owned.size(), b.buckets().size());
    for (size_t k = 0; k < owned.size(); ++k) {
      if (k > 0) {
        EXPECT_LT(owned[k - 1].begin, owned[k].begin) << "owned() is sorted by begin";
      }
      const Interval& bucket = b.buckets()[b.buckets().size() - 1 - k];
      EXPECT_EQ(owned[k].size(), bucket.size() / dp);
      EXPECT_EQ(owned[k].begin, bucket.begin + r * owned[k].size()) << "rank r owns chunk r of its bucket";
      for (int64_t i = owned[k].begin; i < owned[k].end; ++i) {
        ASSERT_EQ(owner[i], -1) << "element " << i << " owned twice";
        owner[i] = r;
      }
    }
  }
  for (int64_t i = 0; i < b.padded_numel(); ++i) ASSERT_NE(owner[i], -1) << "element " << i << " owned by no rank";
}

TEST(ParallelGradBuckets, LayoutFromTheEndWithPadding) {
  const GradBuckets b(1003, 300, 4);
  EXPECT_EQ(b.numel(), 1003);
  EXPECT_EQ(b.padded_numel(), 1004);
  EXPECT_EQ(b.bucket_elems(), 300);
  const std::vector<Interval> want = {{704, 1004}, {404, 704}, {104, 404}, {0, 104}};
  EXPECT_EQ(b.buckets(), want);
  const std::vector<Interval> owned1 = {{26, 52}, {179, 254}, {479, 554}, {779, 854}};
  EXPECT_EQ(b.owned(1), owned1);
  expect_consistent_layout(b);
}

TEST(ParallelGradBuckets, BucketSizeIsRoundedUpToTheDpSize) {
  const GradBuckets b(100, 10, 3);
  EXPECT_EQ(b.bucket_elems(), 12);
  EXPECT_EQ(b.padded_numel(), 102);
  EXPECT_EQ(b.buckets().size(), 9u);  // 8 x 12 + 6
  EXPECT_EQ(b.buckets().back(), (Interval{0, 6}));
  expect_consistent_layout(b);
}

TEST(ParallelGradBuckets, ManyShapesAreConsistent) {
  for (int dp : {1, 2, 3, 4, 7, 8}) {
    for (int64_t numel : {0, 1, 5, 64, 999, 4096, 10007}) {
      for (int64_t bucket : {1, 7, 64, 1000, 100000}) {
        SCOPED_TRACE("dp " + std::to_string(dp) + " numel " + std::to_string(numel) + " bucket " +
                     std::to_string(bucket));
        expect_consistent_layout(GradBuckets(numel, bucket, dp));
      }
    }
  }
}

TEST(ParallelGradBuckets, DefaultBucketIsMegatrons) {
  EXPECT_EQ(GradBuckets::default_bucket_elems(1), 40000000);
  EXPECT_EQ(GradBuckets::default_bucket_elems(64), 64000000);
  const GradBuckets small(3428608, 0, 8);
  EXPECT_EQ(small.bucket_elems(), 40000000);
  ASSERT_EQ(small.buckets().size(), 1u);
  EXPECT_EQ(small.buckets()[0], (Interval{0, 3428608}));
  const GradBuckets big(100000000, -1, 2);  // 100M params: 40M + 40M + 20M
  const std::vector<Interval> want = {{60000000, 100000000}, {20000000, 60000000}, {0, 20000000}};
  EXPECT_EQ(big.buckets(), want);
}

TEST(ParallelGradBuckets, BucketsStayBelowTwoToThe31) {
  const int64_t numel = int64_t{5} << 30;  // 5 Gi elements: layout only, nothing is allocated
  const GradBuckets b(numel, int64_t{1} << 40, 3);
  EXPECT_EQ(b.bucket_elems(), GradBuckets::max_bucket_elems(3));
  EXPECT_LT(b.bucket_elems(), int64_t{1} << 31);
  EXPECT_EQ(b.bucket_elems() % 3, 0);
  EXPECT_EQ(b.buckets().size(), 3u);
  for (const Interval& iv : b.buckets()) EXPECT_LT(iv.size(), int64_t{1} << 31);
}

TEST(ParallelGradBuckets, RejectsBadArguments) {
  EXPECT_THROW(GradBuckets(10, 4, 0), Error);
  EXPECT_THROW(GradBuckets(10, 4, -2), Error);
  EXPECT_THROW(GradBuckets(-1, 4, 2), Error);
  const GradBuckets b(10, 4, 2);
  EXPECT_THROW(b.owned(2), Error);
  EXPECT_THROW(b.owned(-1), Error);
  MetaComm wrong_size("dp", 0, 3);
  std::vector<float> g(b.padded_numel());
  EXPECT_THROW(b.all_reduce(wrong_size, g.data()), Error);
  EXPECT_THROW(b.reduce_scatter(wrong_size, g.data()), Error);
  EXPECT_THROW(b.all_gather(wrong_size, g.data()), Error);
}

TEST(ParallelGradBuckets, IntervalPairs) {
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 3}, {7, 9}};
  EXPECT_EQ(interval_pairs({{0, 3}, {7, 9}}), want);
}

// One call per bucket, bucket 0 first, with the wire size of the caller's
// dtype; shape-only (null buffers) under MetaComm.
TEST(ParallelGradBuckets, OneCallPerBucketInBucketOrder) {
  const GradBuckets b(1003, 300, 4);
  MetaComm dp("dp", 2, 4);
  std::vector<CommEvent> events;
  dp.set_observer([&](const CommEvent& e) { events.push_back(e); });
  b.all_reduce(dp, nullptr, Wire::of(DType::kBF16));
  b.reduce_scatter(dp, nullptr);
  b.all_gather(dp, nullptr);
  ASSERT_EQ(events.size(), 3 * b.buckets().size());
  for (size_t k = 0; k < events.size(); ++k) {
    const Interval& bucket = b.buckets()[k % b.buckets().size()];
    const CommOp want_op = k < 4 ? CommOp::kAllReduce : k < 8 ? CommOp::kReduceScatter : CommOp::kAllGather;
    EXPECT_EQ(events[k].op, want_op);
    EXPECT_EQ(events[k].elements, bucket.size());
    EXPECT_EQ(events[k].bytes, bucket.size() * (k < 4 ? 2 : 4));
  }
}

// Rank r's gradients: distinct per rank, zero in the padding, spread over
// many binades so that a sum in another order gives other bits.
std::vector<float> rank_grads(const GradBuckets& b, int rank) {
  std::vector<float> g(b.padded_numel(), 0.0f);
  for (int64_t i = 0; i < b.numel(); ++i) g[i] = testing::test_value<float>(100, rank, i);
  return g;
}

// ((g0 + g1) + g2) + ... in float: the Comm's deterministic order.
std::vector<float> rank_order_sum(const GradBuckets& b) {
  std::vector<float> sum = rank_grads(b, 0);
  for (int r = 1; r < b.dp_size(); ++r) {
    const std::vector<float> g = rank_grads(b, r);
    for (int64_t i = 0; i < b.padded_numel(); ++i) sum[i] += g[i];
  }
  return sum;
}

class ParallelGradBucketsSim : public ::testing::TestWithParam<int> {};

TEST_P(ParallelGradBucketsSim, AllReduceEqualsRankOrderSum) {
  const int dp = GetParam();
  const GradBuckets b(10007, 1000, dp);
  const std::vector<float> want = rank_order_sum(b);
  std::vector<std::vector<float>> got(dp);
  SimWorld world(dp);
  world.run([&](int rank) {
    omp_set_num_threads(1);
    auto comm = world.make_world_comm(rank);
    got[rank] = rank_grads(b, rank);
    b.all_reduce(*comm, got[rank].data());
  });
  for (int r = 0; r < dp; ++r) EXPECT_EQ(got[r], want) << "rank " << r << " must hold the bit-exact rank-order sum";
}

TEST_P(ParallelGradBucketsSim, ReduceScatterThenAllGatherRoundTrip) {
  const int dp = GetParam();
  const GradBuckets b(10007, 1000, dp);
  const std::vector<float> sum = rank_order_sum(b);
  std::vector<std::vector<float>> scattered(dp), gathered(dp);
  SimWorld world(dp);
  world.run([&](int rank) {
    omp_set_num_threads(1);
    auto comm = world.make_world_comm(rank);
    std::vector<float> g = rank_grads(b, rank);
    b.reduce_scatter(*comm, g.data());
    scattered[rank] = g;
    // Gather the reduced shards back: every rank must end with the full sum.
    b.all_gather(*comm, g.data());
    gathered[rank] = g;
  });
  for (int r = 0; r < dp; ++r) {
    std::vector<bool> owned(b.padded_numel(), false);
    for (const Interval& iv : b.owned(r)) {
      for (int64_t i = iv.begin; i < iv.end; ++i) owned[i] = true;
    }
    for (int64_t i = 0; i < b.padded_numel(); ++i) {
      if (owned[i]) {
        ASSERT_EQ(scattered[r][i], sum[i]) << "rank " << r << " owned element " << i;
      }
    }
    EXPECT_EQ(gathered[r], sum) << "rank " << r;
  }
}

// OverlappedParamGather: every bucket's all-gather started at once, waited
// for piecewise (the range a forward is about to read), equals the blocking
// all_gather bit for bit; a read only waits for the buckets up to the last
// one holding part of it, in forward order (lowest offsets first).
TEST_P(ParallelGradBucketsSim, OverlappedParamGatherEqualsAllGather) {
  const int dp = GetParam();
  const GradBuckets b(10007, 1000, dp);
  std::vector<std::vector<float>> blocking(dp), overlapped(dp);
  SimWorld world(dp);
  world.run([&](int rank) {
    omp_set_num_threads(1);
    auto comm = world.make_world_comm(rank);
    blocking[rank] = rank_grads(b, rank);
    overlapped[rank] = blocking[rank];
    b.all_gather(*comm, blocking[rank].data());
    OverlappedParamGather gather(b, *comm, overlapped[rank].data());
    gather.wait_for(0, 10);  // the first bucket in forward order only
    EXPECT_FALSE(gather.finished());
    gather.wait_for(5000, 5001);
    gather.finish();
    EXPECT_TRUE(gather.finished());
  });
  for (int r = 0; r < dp; ++r) EXPECT_EQ(overlapped[r], blocking[r]) << "rank " << r;
}

TEST(ParallelOverlappedParamGather, PrefixInForwardOrder) {
  const GradBuckets b(1003, 300, 4);  // buckets [704, 1004) [404, 704) [104, 404) [0, 104)
  EXPECT_EQ(param_gather_prefix(b, 0, 10), 1u);
  EXPECT_EQ(param_gather_prefix(b, 100, 110), 2u);
  EXPECT_EQ(param_gather_prefix(b, 404, 405), 3u);
  EXPECT_EQ(param_gather_prefix(b, 50, 1003), 4u);
  EXPECT_EQ(param_gather_prefix(b, 2000, 3000), 0u);
  MetaComm dp("dp", 2, 4);
  std::vector<CommEvent> events;
  dp.set_observer([&](const CommEvent& e) { events.push_back(e); });
  {
    OverlappedParamGather gather(b, dp, nullptr, Wire::of(DType::kBF16));
    EXPECT_TRUE(events.empty()) << "reported when waited for, not when started";
    gather.wait_for(100, 110);
    EXPECT_EQ(events.size(), 2u);
  }  // the rest on destruction
  ASSERT_EQ(events.size(), 4u);
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].op, CommOp::kAllGather);
    EXPECT_TRUE(events[i].nonblocking);
    EXPECT_EQ(events[i].elements, b.buckets()[b.buckets().size() - 1 - i].size()) << "forward order";
  }
}

INSTANTIATE_TEST_SUITE_P(Dp, ParallelGradBucketsSim, ::testing::Values(2, 3, 4));

// --- OverlappedReduction ---------------------------------------------------

// How a test marks the buffer ready. The same sequence on every rank.
enum class Marks { kPerParamReverse, kRandomChunks, kAllAtOnce, kUpperHalfOnly, kNone };

// [begin, end) ranges cut from [0, numel) at random (seeded) boundaries.
std::vector<Interval> random_pieces(int64_t numel, uint64_t seed, int64_t max_piece) {
  std::vector<Interval> pieces;
  for (int64_t begin = 0, i = 0; begin < numel; ++i) {
    const int64_t size = 1 + static_cast<int64_t>(uniform01(seed, i) * static_cast<float>(max_piece));
    pieces.push_back({begin, std::min(numel, begin + size)});
    begin = pieces.back().end;
  }
  return pieces;
}

std::vector<Interval> mark_sequence(const GradBuckets& b, Marks marks) {
  std::vector<Interval> seq;
  switch (marks) {
    case Marks::kPerParamReverse:  // parameters of up to 1500 elements, last first (as backward)
      seq = random_pieces(b.numel(), 11, 1500);
      std::reverse(seq.begin(), seq.end());
      break;
    case Marks::kRandomChunks:  // pieces in a shuffled order (a fixed permutation)
      seq = random_pieces(b.numel(), 12, 700);
      for (size_t i = seq.size(); i > 1; --i) std::swap(seq[i - 1], seq[static_cast<size_t>(uniform01(13, i) * i)]);
      break;
    case Marks::kAllAtOnce:
      seq.push_back({0, b.padded_numel()});
      break;
    case Marks::kUpperHalfOnly:
      seq.push_back({b.numel() / 2, b.numel()});
      break;
    case Marks::kNone:
      break;
  }
  return seq;
}

// Buckets whose real elements lie in the union of the marks so far.
int complete_buckets(const GradBuckets& b, const std::vector<bool>& marked) {
  int complete = 0;
  for (const Interval& bucket : b.buckets()) {
    bool all = true;
    for (int64_t i = bucket.begin; i < std::min(bucket.end, b.numel()) && all; ++i) all = marked[i];
    complete += all;
  }
  return complete;
}

struct OverlapCase {
  int dp;
  bool scatter;
  Marks marks;
};

class ParallelOverlappedReduction : public ::testing::TestWithParam<OverlapCase> {};

// Each rank reduces its gradients overlapped and, on a second copy, with the
// blocking GradBuckets call; the buffers must hold the same bits. After each
// mark exactly the complete buckets have been started.
TEST_P(ParallelOverlappedReduction, EqualsBlockingReduction) {
  const auto [dp, scatter, marks] = GetParam();
  const GradBuckets b(10007, 1000, dp);  // 11 buckets; padding 10007 -> round_up(dp)
  const std::vector<Interval> seq = mark_sequence(b, marks);
  std::vector<int> mismatches(dp, -1), early(dp, -1), wrong_starts(dp, -1);
  SimWorld world(dp, SimWorldOptions{.timeout_seconds = 20});
  world.run([&](int rank) {
    omp_set_num_threads(1);
    auto comm = world.make_world_comm(rank);
    std::vector<float> overlapped = rank_grads(b, rank), blocking = overlapped;
    std::vector<bool> marked(b.numel(), false);
    wrong_starts[rank] = 0;
    OverlappedReduction reduction(b, *comm, overlapped.data(), scatter);
    for (const Interval& m : seq) {
      reduction.mark_ready(m.begin, m.end);
      for (int64_t i = m.begin; i < std::min(m.end, b.numel()); ++i) marked[i] = true;
      wrong_starts[rank] += reduction.buckets_started() != complete_buckets(b, marked);
    }
    early[rank] = reduction.buckets_started_early();
    reduction.finish();
    reduction.finish();  // idempotent
    scatter ? b.reduce_scatter(*comm, blocking.data()) : b.all_reduce(*comm, blocking.data());
    mismatches[rank] = std::memcmp(overlapped.data(), blocking.data(), b.padded_numel() * sizeof(float)) != 0;
  });
  const int buckets = static_cast<int>(b.buckets().size());
  for (int r = 0; r < dp; ++r) {
    EXPECT_EQ(mismatches[r], 0) << "rank " << r << ": other bits than the blocking reduction";
    EXPECT_EQ(wrong_starts[r], 0) << "rank " << r << ": marks after which started buckets != complete buckets";
    if (marks == Marks::kNone) {
      EXPECT_EQ(early[r], 0);
    } else if (marks == Marks::kUpperHalfOnly) {
      EXPECT_TRUE(early[r] > 0 && early[r] < buckets) << early[r] << " of " << buckets << " started early";
    } else {
      EXPECT_EQ(early[r], buckets) << "every bucket is complete before finish()";
    }
  }
}

std::vector<OverlapCase> overlap_cases() {
  std::vector<OverlapCase> cases;
  for (int dp : {2, 3, 4}) {
    for (bool scatter : {false, true}) {
      for (Marks m :
           {Marks::kPerParamReverse, Marks::kRandomChunks, Marks::kAllAtOnce, Marks::kUpperHalfOnly, Marks::kNone}) {
        cases.push_back({dp, scatter, m});
      }
    }
  }
  return cases;
}

std::string overlap_case_name(const ::testing::TestParamInfo<OverlapCase>& info) {
  const char* marks[] = {"PerParamReverse", "RandomChunks", "AllAtOnce", "UpperHalfOnly", "NoMarks"};
  return "Dp" + std::to_string(info.param.dp) + (info.param.scatter ? "ReduceScatter" : "AllReduce") +
         marks[static_cast<int>(info.param.marks)];
}

INSTANTIATE_TEST_SUITE_P(Cases, ParallelOverlappedReduction, ::testing::ValuesIn(overlap_cases()), overlap_case_name);

// Gradual marks start the buckets early, one collective per bucket, each
// reported once as non-blocking with the bucket's size; shape-only on MetaComm.
TEST(ParallelOverlappedReductionMeta, OneNonBlockingCallPerBucket) {
  const GradBuckets b(1003, 300, 4);
  MetaComm dp("dp", 1, 4);
  std::vector<CommEvent> events;
  dp.set_observer([&](const CommEvent& e) { events.push_back(e); });
  OverlappedReduction reduction(b, dp, nullptr, /*scatter=*/true, Wire::of(DType::kBF16));
  reduction.mark_ready(800, 1003);  // bucket 0 = [704, 1004) still lacks [704, 800)
  EXPECT_EQ(reduction.buckets_started(), 0);
  reduction.mark_ready(704, 800);  // its padding (1003) is final from the start: complete
  EXPECT_EQ(reduction.buckets_started(), 1);
  reduction.mark_ready(500, 704);  // bucket 1 = [404, 704) still lacks [404, 500)
  EXPECT_EQ(reduction.buckets_started(), 1);
  reduction.mark_ready(404, 500);
  EXPECT_EQ(reduction.buckets_started(), 2);
  reduction.finish();
  EXPECT_EQ(reduction.buckets_started_early(), 2);
  EXPECT_EQ(reduction.buckets_started(), 4);
  ASSERT_EQ(events.size(), b.buckets().size());
  for (size_t k = 0; k < events.size(); ++k) {
    EXPECT_EQ(events[k].op, CommOp::kReduceScatter);
    EXPECT_TRUE(events[k].nonblocking);
    EXPECT_EQ(events[k].elements, b.buckets()[k].size());
    EXPECT_EQ(events[k].bytes, 2 * b.buckets()[k].size());
  }
}

TEST(ParallelOverlappedReductionMeta, BadMarksAreCallerBugs) {
  const GradBuckets b(1003, 300, 4);
  MetaComm dp("dp", 0, 4);
  OverlappedReduction reduction(b, dp, nullptr, /*scatter=*/false);
  reduction.mark_ready(100, 200);
  reduction.mark_ready(200, 300);    // adjacent: fine
  reduction.mark_ready(1003, 1004);  // padding only: ignored
  reduction.mark_ready(50, 50);      // empty
  try {
    reduction.mark_ready(250, 260);
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kInternal);
    EXPECT_STREQ(e.what(),
                 "overlapped grad reduction: [250, 260) marked ready twice (it overlaps [100, 300), marked before)");
  }
  EXPECT_THROW(reduction.mark_ready(0, 101), Error);    // overlaps at the start of [100, 300)
  EXPECT_THROW(reduction.mark_ready(299, 400), Error);  // overlaps at its end
  EXPECT_THROW(reduction.mark_ready(-1, 10), Error);    // outside the buffer
  EXPECT_THROW(reduction.mark_ready(10, 1005), Error);  // past padded_numel
  EXPECT_THROW(reduction.mark_ready(20, 10), Error);    // reversed
  reduction.mark_ready(0, 100);                         // the failed marks recorded nothing
  reduction.finish();
  EXPECT_THROW(reduction.mark_ready(400, 500), Error);  // after finish
  MetaComm wrong_size("dp", 0, 3);
  EXPECT_THROW(OverlappedReduction(b, wrong_size, nullptr, false), Error);
}

// DP = 1 (SelfComm): nothing moves, reduce_scatter copies onto itself.
TEST(ParallelOverlappedReductionMeta, SingleRankLeavesGradientsAsTheyAre) {
  const GradBuckets b(101, 16, 1);
  SelfComm dp("dp");
  std::vector<float> g = rank_grads(b, 0);
  const std::vector<float> want = g;
  for (bool scatter : {false, true}) {
    OverlappedReduction reduction(b, dp, g.data(), scatter);
    for (int64_t end = b.numel(); end > 0; end -= 10) reduction.mark_ready(std::max<int64_t>(0, end - 10), end);
    reduction.finish();
    EXPECT_EQ(reduction.buckets_started_early(), static_cast<int>(b.buckets().size()));
    EXPECT_EQ(g, want);
  }
}

}  // namespace
}  // namespace mtrain::parallel
