// Tensor statistics against values computed here, term by term.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "profiler/tensor_stats.h"

namespace mtrain::profiler {
namespace {

TEST(TensorStats, MatchesDirectComputation) {
  const std::vector<float> v = {1.5f, -2.0f, 0.25f, 3.0f, -0.5f};
  const TensorStats s = tensor_stats(v.data(), 5);
  EXPECT_EQ(s.count, 5);
  EXPECT_EQ(s.finite, 5);
  EXPECT_EQ(s.nan, 0);
  EXPECT_EQ(s.inf, 0);
  EXPECT_DOUBLE_EQ(s.max, 3.0);
  EXPECT_DOUBLE_EQ(s.min, -2.0);
  EXPECT_DOUBLE_EQ(s.sum, 1.5 - 2.0 + 0.25 + 3.0 - 0.5);
  EXPECT_DOUBLE_EQ(s.sum_sq, 2.25 + 4.0 + 0.0625 + 9.0 + 0.25);
  EXPECT_DOUBLE_EQ(s.mean(), 2.25 / 5);
  EXPECT_DOUBLE_EQ(s.l2_norm(), std::sqrt(15.5625));
  EXPECT_TRUE(s.all_finite());
}

TEST(TensorStats, NonFiniteValuesAreCountedAndLeftOutOfTheRest) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> v = {nan, 2.0f, -inf, -4.0f, inf, nan};
  const TensorStats s = tensor_stats(v.data(), 6);
  EXPECT_EQ(s.count, 6);
  EXPECT_EQ(s.finite, 2);
  EXPECT_EQ(s.nan, 2);
  EXPECT_EQ(s.inf, 2);
  EXPECT_DOUBLE_EQ(s.max, 2.0);
  EXPECT_DOUBLE_EQ(s.min, -4.0);
  EXPECT_DOUBLE_EQ(s.mean(), -1.0);
  EXPECT_DOUBLE_EQ(s.l2_norm(), std::sqrt(20.0));
  EXPECT_FALSE(s.all_finite());

  const std::vector<float> none = {nan, inf};
  const TensorStats n = tensor_stats(none.data(), 2);
  EXPECT_TRUE(std::isnan(n.max));
  EXPECT_TRUE(std::isnan(n.min));
  EXPECT_TRUE(std::isnan(n.mean()));
  EXPECT_EQ(n.l2_norm(), 0.0);
}

TEST(TensorStats, ShardsMergeIntoTheWholeTensor) {
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i)) * (1.0f + i % 7);
  v[123] = std::numeric_limits<float>::quiet_NaN();
  const TensorStats whole = tensor_stats(v.data(), 1000);
  // Three uneven shards, merged in either order.
  const TensorStats a = tensor_stats(v.data(), 300), b = tensor_stats(v.data() + 300, 450),
                    c = tensor_stats(v.data() + 750, 250);
  for (const TensorStats& m : {merge_stats(merge_stats(a, b), c), merge_stats(c, merge_stats(b, a))}) {
    EXPECT_EQ(m.count, whole.count);
    EXPECT_EQ(m.finite, whole.finite);
    EXPECT_EQ(m.nan, 1);
    EXPECT_DOUBLE_EQ(m.max, whole.max);
    EXPECT_DOUBLE_EQ(m.min, whole.min);
    EXPECT_NEAR(m.sum, whole.sum, 1e-9 * whole.sum_sq);
    EXPECT_NEAR(m.sum_sq, whole.sum_sq, 1e-12 * whole.sum_sq);
  }
  // A shard without finite values does not disturb max/min.
  const float inf = std::numeric_limits<float>::infinity();
  const TensorStats only_inf = tensor_stats(&inf, 1);
  const TensorStats m = merge_stats(only_inf, a);
  EXPECT_DOUBLE_EQ(m.max, a.max);
  EXPECT_DOUBLE_EQ(m.min, a.min);
  EXPECT_EQ(m.inf, 1);
  EXPECT_EQ(m.count, a.count + 1);
}

}  // namespace
}  // namespace mtrain::profiler
