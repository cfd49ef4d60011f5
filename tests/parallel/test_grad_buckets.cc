// GradBuckets: the bucket layout (sizes, order, padding, owned chunks), the
// bucketed DP all-reduce against a rank-order sum, and the reduce_scatter +
// all_gather round trip of the distributed optimizer, on SimWorld DP 2, 3, 4.
#include <gtest/gtest.h>
#include <omp.h>

#include <vector>

#include "common/errors.h"
#include "common/rng.h"
#include "parallel/grad_buckets.h"
#include "parallel/local_comm.h"
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

// Rank r's gradients: distinct per rank, zero in the padding.
std::vector<float> rank_grads(const GradBuckets& b, int rank) {
  std::vector<float> g(b.padded_numel(), 0.0f);
  for (int64_t i = 0; i < b.numel(); ++i) g[i] = 2.0f * uniform01(100 + rank, i) - 1.0f;
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

INSTANTIATE_TEST_SUITE_P(Dp, ParallelGradBucketsSim, ::testing::Values(2, 3, 4));

}  // namespace
}  // namespace mtrain::parallel
