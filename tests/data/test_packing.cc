// Packing: rows never exceed packing_length, never split a sample, hold
// every sample exactly once (best-fit decreasing, deterministic), and a
// packed row's batch has per-sample positions, doc ids, targets and loss
// weights equal to those of the samples batched alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "data/loader.h"
#include "data/packing.h"
#include "data_test_util.h"

namespace mtrain::data {
namespace {

// Sample i: tokens 100*i + 0.., mask 0 on the first half, 1 after.
Sample sample_of(int i, int length) {
  Sample s;
  for (int t = 0; t < length; ++t) {
    s.tokens.push_back(100 * i + t);
    s.loss_mask.push_back(t >= length / 2 ? 1 : 0);
  }
  return s;
}

TEST(Packing, BestFitDecreasingKnownLayout) {
  // Lengths 7 5 4 3 3 2 into rows of 10: 7+3, 5+4, 3+2 (best fit puts 3 into the 7's row,
  // 4 into the 5's row, the second 3 into a new row, 2 into the row with least room: the 3's).
  std::vector<Sample> samples;
  const std::vector<int> lengths = {3, 7, 2, 5, 4, 3};
  for (size_t i = 0; i < lengths.size(); ++i) samples.push_back(sample_of(static_cast<int>(i), lengths[i]));
  const std::vector<Sample> rows = pack_samples(samples, 10);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].doc_lengths, (std::vector<int32_t>{7, 3}));
  EXPECT_EQ(rows[1].doc_lengths, (std::vector<int32_t>{5, 4}));
  EXPECT_EQ(rows[2].doc_lengths, (std::vector<int32_t>{3, 2}));
  EXPECT_EQ(rows[0].tokens.front(), 100);  // sample 1 (length 7) first
  EXPECT_EQ(rows[0].tokens[7], 0);         // then sample 0 (the first length-3 sample)
  EXPECT_EQ(rows[2].tokens.front(), 500);  // the second length-3 sample
  int64_t total = 0;
  for (const Sample& r : rows) {
    EXPECT_LE(r.tokens.size(), 10u);
    EXPECT_EQ(r.tokens.size(), r.loss_mask.size());
    EXPECT_EQ(std::accumulate(r.doc_lengths.begin(), r.doc_lengths.end(), size_t{0}), r.tokens.size());
    total += static_cast<int64_t>(r.tokens.size());
  }
  EXPECT_EQ(total, 24);
  EXPECT_EQ(pack_samples(samples, 10)[1].tokens, rows[1].tokens);  // deterministic
}

TEST(Packing, EverySampleOnceAndWhole) {
  std::vector<Sample> samples;
  for (int i = 0; i < 40; ++i) samples.push_back(sample_of(i, 2 + (i * 7) % 15));
  const std::vector<Sample> rows = pack_samples(samples, 16);
  std::vector<int> seen(40, 0);
  for (const Sample& r : rows) {
    ASSERT_LE(r.tokens.size(), 16u);
    size_t offset = 0;
    for (int32_t n : r.doc_lengths) {
      const int id = r.tokens[offset] / 100;
      EXPECT_EQ(std::vector<int32_t>(r.tokens.begin() + offset, r.tokens.begin() + offset + n), samples[id].tokens);
      ++seen[id];
      offset += n;
    }
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  EXPECT_THROW(pack_samples({sample_of(0, 17)}, 16), DataError);
}

TEST(Packing, PackedBatchMatchesTheSamplesAlone) {
  const std::vector<Sample> samples = {sample_of(1, 5), sample_of(2, 4)};
  const std::vector<Sample> rows = pack_samples(samples, 12);
  ASSERT_EQ(rows.size(), 1u);
  const std::vector<int64_t> row0 = {0};
  const Batch packed = make_batch(rows, row0, 12, /*pad_id=*/-1);
  ASSERT_EQ(packed.T, 12);
  EXPECT_EQ(packed.positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 0, 1, 2}));
  EXPECT_EQ(packed.doc_ids, (std::vector<int32_t>{0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2}));
  size_t offset = 0;
  for (int64_t i = 0; i < 2; ++i) {
    const std::vector<int64_t> one = {i};
    const Batch alone = make_batch(samples, one, 0, -1);
    const auto n = static_cast<size_t>(alone.T);  // L - 1 inputs
    for (size_t t = 0; t < n; ++t) {
      EXPECT_EQ(packed.tokens[offset + t], alone.tokens[t]);
      EXPECT_EQ(packed.targets[offset + t], alone.targets[t]);
      EXPECT_EQ(packed.loss_weights[offset + t], alone.loss_weights[t]);
    }
    // The sample's last token is an input without a target.
    EXPECT_EQ(packed.targets[offset + n], -1);
    EXPECT_EQ(packed.loss_weights[offset + n], 0.0f);
    offset += n + 1;
  }
  EXPECT_EQ(packed.num_loss_tokens(), make_batch(samples, std::vector<int64_t>{0, 1}, 0, -1).num_loss_tokens());
  const std::string m = testing::data_error_message([&] { make_batch(rows, row0, 8, -1); });
  EXPECT_EQ(m, "packed row 0 has 9 tokens, more than seq_len = 8");
}

}  // namespace
}  // namespace mtrain::data
