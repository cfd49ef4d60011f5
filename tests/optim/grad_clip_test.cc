// Gradient norm and Megatron's clipping rule.
#include "optim/grad_clip.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "common/errors.h"
#include "common/rng.h"

namespace mtrain::optim {
namespace {

std::vector<float> random_grads(int64_t n, uint64_t seed) {
  std::vector<float> g(n);
  for (int64_t i = 0; i < n; ++i) g[i] = 2.0f * uniform01(seed, i) - 1.0f;
  return g;
}

TEST(GradNorm, KnownValues) {
  const float g[2] = {3.0f, 4.0f};
  EXPECT_DOUBLE_EQ(grad_norm(g, 2), 5.0);
  EXPECT_EQ(grad_norm(g, 0), 0.0);
  const int64_t n = 100003;  // not a multiple of the block or lane count
  std::vector<float> half(n, 0.5f);
  EXPECT_NEAR(grad_norm(half.data(), n), 0.5 * std::sqrt(static_cast<double>(n)), 1e-10);
}

TEST(GradNorm, MatchesNaiveDoubleSumAndSplitsAcrossShards) {
  const int64_t n = 54321;
  const std::vector<float> g = random_grads(n, 5);
  double naive = 0.0;
  for (float x : g) naive += static_cast<double>(x) * x;
  EXPECT_NEAR(grad_norm(g.data(), n), std::sqrt(naive), 1e-12 * std::sqrt(naive));
  // The distributed seam: two "ranks" each sum their shard; the caller adds the squares.
  const int64_t cut = 20000;
  const double sq = grad_norm_sq_local(g.data(), cut) + grad_norm_sq_local(g.data() + cut, n - cut);
  EXPECT_NEAR(grad_norm_from_sq(sq), std::sqrt(naive), 1e-12 * std::sqrt(naive));
}

TEST(GradNorm, BitIdenticalForAnyThreadCount) {
  const int64_t n = 1000003;
  const std::vector<float> g = random_grads(n, 9);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = grad_norm_sq_local(g.data(), n);
  omp_set_num_threads(2);
  const double two = grad_norm_sq_local(g.data(), n);
  omp_set_num_threads(saved);
  EXPECT_EQ(one, two);
}

// Intervals chosen to cut blocks and lanes at odd places: lengths not multiples
// of 8, an empty interval, one longer than a block, out of flat order.
std::vector<std::pair<int64_t, int64_t>> odd_intervals() {
  return {{5, 1000}, {1000, 1003}, {77777, 77777}, {200003, 520011}, {2001, 3999}, {600000, 600001}, {700013, 999999}};
}

TEST(GradNormIntervals, MatchesNaiveDoubleLoop) {
  const int64_t n = 1000003;
  const std::vector<float> g = random_grads(n, 21);
  double naive = 0.0;
  for (const auto& [begin, end] : odd_intervals()) {
    for (int64_t i = begin; i < end; ++i) naive += static_cast<double>(g[i]) * g[i];
  }
  EXPECT_NEAR(grad_norm_sq_intervals(g.data(), odd_intervals()), naive, 1e-12 * naive);
  const float small[3] = {3.0f, 100.0f, 4.0f};
  EXPECT_EQ(grad_norm_sq_intervals(small, {{0, 1}, {2, 3}}), 25.0);
  EXPECT_EQ(grad_norm_sq_intervals(small, {}), 0.0);
  EXPECT_EQ(grad_norm_sq_intervals(nullptr, {{4, 4}}), 0.0);
  EXPECT_THROW(grad_norm_sq_intervals(small, {{2, 1}}), Error);
  EXPECT_THROW(grad_norm_sq_intervals(small, {{-1, 1}}), Error);
}

// The same block scheme as grad_norm_sq_local: one interval gives its bits,
// and cutting the sequence into adjacent pieces changes nothing.
TEST(GradNormIntervals, SameBitsAsLocalSumAndIndependentOfPieces) {
  for (int64_t n : {int64_t{1}, int64_t{63}, int64_t{1000}, int64_t{100003}}) {
    const std::vector<float> g = random_grads(n, 33);
    const double whole = grad_norm_sq_local(g.data(), n);
    EXPECT_EQ(grad_norm_sq_intervals(g.data(), {{0, n}}), whole) << n;
    std::vector<std::pair<int64_t, int64_t>> pieces;
    for (int64_t b = 0; b < n; b += 1 + b % 13) pieces.emplace_back(b, std::min(n, b + 1 + b % 13));
    EXPECT_EQ(grad_norm_sq_intervals(g.data(), pieces), whole) << n;
  }
}

TEST(GradNormIntervals, BitIdenticalForAnyThreadCount) {
  const int64_t n = 1000003;
  const std::vector<float> g = random_grads(n, 9);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = grad_norm_sq_intervals(g.data(), odd_intervals());
  omp_set_num_threads(2);
  const double two = grad_norm_sq_intervals(g.data(), odd_intervals());
  omp_set_num_threads(3);
  const double three = grad_norm_sq_intervals(g.data(), odd_intervals());
  omp_set_num_threads(saved);
  EXPECT_EQ(one, two);
  EXPECT_EQ(one, three);
}

TEST(GradNorm, NonFinitePropagates) {
  std::vector<float> g(10, 1.0f);
  g[3] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isinf(grad_norm(g.data(), 10)));
  g[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(grad_norm(g.data(), 10)));
}

TEST(ClipGrads, ScalesByMaxOverNormPlusEpsilon) {
  float g[2] = {3.0f, 4.0f};
  const double norm = grad_norm(g, 2);
  const double coeff = clip_grads(g, 2, 1.0, norm);
  EXPECT_DOUBLE_EQ(coeff, 1.0 / (5.0 + 1e-6));
  EXPECT_EQ(g[0], 3.0f * static_cast<float>(coeff));
  EXPECT_EQ(g[1], 4.0f * static_cast<float>(coeff));
  EXPECT_NEAR(grad_norm(g, 2), 1.0, 1e-6);
}

TEST(ClipGrads, NoOpBelowMaxNorm) {
  float g[2] = {3.0f, 4.0f};
  EXPECT_EQ(clip_grads(g, 2, 10.0, 5.0), 1.0);
  EXPECT_EQ(g[0], 3.0f);
  EXPECT_EQ(g[1], 4.0f);
}

TEST(ClipGrads, NormEqualToMaxStillClipsSlightly) {
  // Megatron's coefficient uses total_norm + 1e-6, so norm == max_norm gives coeff < 1.
  float g[2] = {3.0f, 4.0f};
  const double coeff = clip_grads(g, 2, 5.0, 5.0);
  EXPECT_LT(coeff, 1.0);
  EXPECT_DOUBLE_EQ(coeff, 5.0 / (5.0 + 1e-6));
}

TEST(ClipGrads, DisabledOrNonFiniteNormLeavesGradsAlone) {
  float g[2] = {3.0f, 4.0f};
  EXPECT_EQ(clip_grads(g, 2, 0.0, 5.0), 1.0);  // --clip-grad 0 disables clipping
  EXPECT_EQ(clip_grads(g, 2, 1.0, std::numeric_limits<double>::quiet_NaN()), 1.0);
  EXPECT_EQ(g[0], 3.0f);
  EXPECT_EQ(g[1], 4.0f);
  EXPECT_EQ(clip_coefficient(1.0, std::numeric_limits<double>::infinity()), 0.0);
}

}  // namespace
}  // namespace mtrain::optim
