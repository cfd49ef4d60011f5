// Batches and the data loader: exact padding/targets/weights, deterministic
// per-epoch shuffles, state save/restore, DP slices, train/val split.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "common/errors.h"
#include "data/loader.h"
#include "data_test_util.h"

namespace mtrain::data {
namespace {

using testing::data_error_message;
using Ids = std::vector<int32_t>;
using Indices = std::vector<int64_t>;

Sample make_sample(Ids tokens, std::vector<uint8_t> mask) { return Sample{std::move(tokens), std::move(mask)}; }

// n samples; sample i = {i, i+1, ..., i+len-1} with len = 2 + i % 4, mask all 1.
std::vector<Sample> numbered_samples(int n) {
  std::vector<Sample> samples;
  for (int i = 0; i < n; ++i) {
    Ids tokens(2 + i % 4);
    std::iota(tokens.begin(), tokens.end(), 1000 * i);
    samples.push_back(make_sample(tokens, std::vector<uint8_t>(tokens.size(), 1)));
  }
  return samples;
}

TEST(BatchTest, PaddingTargetsWeightsExact) {
  const std::vector<Sample> samples = {
      make_sample({10, 11, 12, 13, 14}, {0, 0, 1, 1, 1}),  // prompt 10 11, answer 12 13 14
      make_sample({20, 21, 22}, {0, 1, 1}),
  };
  const Batch b = make_batch(samples, Indices{0, 1}, 6, /*pad_id=*/7);
  EXPECT_EQ(b.B, 2);
  EXPECT_EQ(b.T, 6);
  EXPECT_EQ(b.tokens, (Ids{10, 11, 12, 13, 7, 7, /**/ 20, 21, 7, 7, 7, 7}));
  EXPECT_EQ(b.targets, (Ids{11, 12, 13, 14, 7, 7, /**/ 21, 22, 7, 7, 7, 7}));
  EXPECT_EQ(b.loss_weights, (std::vector<float>{0, 1, 1, 1, 0, 0, /**/ 1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(b.positions, (Ids{0, 1, 2, 3, 4, 5, /**/ 0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(b.doc_ids, Ids(12, 0));
  EXPECT_EQ(b.num_loss_tokens(), 5);
}

TEST(BatchTest, SeqLenZeroPadsToLongestAndTooLongIsAnError) {
  const std::vector<Sample> samples = numbered_samples(4);  // lengths 2, 3, 4, 5
  const Batch b = make_batch(samples, Indices{1, 2}, 0, 0);
  EXPECT_EQ(b.T, 3);  // longest sample has 4 tokens -> 3 inputs
  EXPECT_EQ(b.tokens, (Ids{1000, 1001, 0, 2000, 2001, 2002}));
  const std::string m = data_error_message([&] { make_batch(samples, Indices{3}, 3, 0); });
  EXPECT_EQ(m, "sample 3 has 5 tokens, more than seq_len + 1 = 4");
}

// Megatron's get_batch_on_this_cp_rank: a row of T = 8 cut into 2*CP chunks;
// CP rank i keeps chunks i and 2*CP-1-i of every field, in that order.
TEST(BatchTest, ContextParallelSliceKeepsChunksIAndMirror) {
  Batch b;
  b.B = 2, b.T = 8;
  for (int r = 0; r < 2; ++r)
    for (int t = 0; t < 8; ++t) {
      b.tokens.push_back(100 * r + t), b.targets.push_back(100 * r + t + 1), b.positions.push_back(t);
      b.doc_ids.push_back(t / 3), b.loss_weights.push_back(t % 2 ? 1.0f : 0.0f);
    }
  const Batch r0 = context_parallel_slice(b, 2, 0), r1 = context_parallel_slice(b, 2, 1);
  EXPECT_EQ(r0.T, 4);
  EXPECT_EQ(r0.positions, (std::vector<int32_t>{0, 1, 6, 7, 0, 1, 6, 7}));  // chunks 0 and 3
  EXPECT_EQ(r1.positions, (std::vector<int32_t>{2, 3, 4, 5, 2, 3, 4, 5}));  // chunks 1 and 2
  EXPECT_EQ(r1.tokens, (std::vector<int32_t>{2, 3, 4, 5, 102, 103, 104, 105}));
  EXPECT_EQ(r0.targets, (std::vector<int32_t>{1, 2, 7, 8, 101, 102, 107, 108}));
  EXPECT_EQ(r0.doc_ids, (std::vector<int32_t>{0, 0, 2, 2, 0, 0, 2, 2}));
  EXPECT_EQ(r1.loss_weights, (std::vector<float>{0, 1, 0, 1, 0, 1, 0, 1}));
  const Batch q3 = context_parallel_slice(b, 4, 3);  // CP 4: chunks 3 and 4 of 8
  EXPECT_EQ(q3.positions, (std::vector<int32_t>{3, 4, 3, 4}));
  EXPECT_THROW(context_parallel_slice(b, 3, 0), Error) << "T = 8 does not split into 6 chunks";
}

TEST(DataLoaderTest, ShuffleIsDeterministicPerSeedAndDiffersAcrossEpochs) {
  DataLoader a(numbered_samples(50), {.seed = 7});
  DataLoader b(numbered_samples(50), {.seed = 7});
  DataLoader c(numbered_samples(50), {.seed = 8});
  EXPECT_EQ(a.epoch_order(0), b.epoch_order(0));
  EXPECT_NE(a.epoch_order(0), c.epoch_order(0));
  EXPECT_NE(a.epoch_order(0), a.epoch_order(1));
  for (int64_t epoch : {0, 1, 5}) {
    Indices order = a.epoch_order(epoch);
    std::sort(order.begin(), order.end());
    Indices identity(50);
    std::iota(identity.begin(), identity.end(), 0);
    EXPECT_EQ(order, identity) << "epoch " << epoch << " is not a permutation";
  }
  DataLoader unshuffled(numbered_samples(5), {.seed = 7, .shuffle = false});
  EXPECT_EQ(unshuffled.next_global_batch(5), (Indices{0, 1, 2, 3, 4}));
}

TEST(DataLoaderTest, GlobalBatchesWalkEpochsAndCrossTheBoundary) {
  DataLoader loader(numbered_samples(10), {.seed = 3});
  const Indices e0 = loader.epoch_order(0), e1 = loader.epoch_order(1);
  EXPECT_EQ(loader.next_global_batch(4), Indices(e0.begin(), e0.begin() + 4));
  EXPECT_EQ(loader.next_global_batch(4), Indices(e0.begin() + 4, e0.begin() + 8));
  Indices crossing(e0.begin() + 8, e0.end());
  crossing.insert(crossing.end(), e1.begin(), e1.begin() + 2);
  EXPECT_EQ(loader.next_global_batch(4), crossing);
  EXPECT_EQ(loader.epoch(), 1);
  EXPECT_EQ(loader.cursor(), 2);
  EXPECT_EQ(loader.consumed_samples(), 12);
}

TEST(DataLoaderTest, StateRestoreContinuesIdentically) {
  DataLoader original(numbered_samples(13), {.seed = 11, .pad_id = 0});
  for (int i = 0; i < 5; ++i) original.next_global_batch(4);  // into epoch 1
  const DataLoader::State saved = original.state();
  EXPECT_EQ(saved.epoch, 1);
  EXPECT_EQ(saved.cursor, 7);
  EXPECT_EQ(saved.consumed_samples, 20);
  EXPECT_EQ(saved.num_samples, 13);

  DataLoader resumed(numbered_samples(13), {.seed = 999});  // the seed comes from the state
  resumed.set_state(saved);
  for (int step = 0; step < 20; ++step) {
    const Batch x = original.next_microbatch(3, 4);
    const Batch y = resumed.next_microbatch(3, 4);
    ASSERT_EQ(x.tokens, y.tokens) << "step " << step;
    ASSERT_EQ(x.loss_weights, y.loss_weights) << "step " << step;
  }
  EXPECT_EQ(original.state().epoch, resumed.state().epoch);
  EXPECT_EQ(original.state().cursor, resumed.state().cursor);

  DataLoader other_size(numbered_samples(12), {.seed = 11});
  const std::string m = data_error_message([&] { other_size.set_state(saved); });
  EXPECT_EQ(m, "data loader state is for a dataset of 13 samples, but this one has 12");
}

TEST(DataLoaderTest, DpRankSlices) {
  const Indices global = {5, 6, 7, 8, 9, 10};
  const auto r1 = dp_rank_slice(global, 1, 3);
  EXPECT_EQ(Indices(r1.begin(), r1.end()), (Indices{7, 8}));
  EXPECT_THROW(dp_rank_slice(global, 0, 4), Error);
}

TEST(SplitTest, DeterministicDisjointAndOrdered) {
  const auto split = split_train_val(numbered_samples(40), 0.1, 42);
  ASSERT_EQ(split.val.size(), 4u);
  ASSERT_EQ(split.train.size(), 36u);
  std::set<int32_t> firsts;
  for (const auto* part : {&split.train, &split.val}) {
    for (size_t i = 0; i < part->size(); ++i) {
      firsts.insert((*part)[i].tokens[0]);
      if (i > 0) {
        EXPECT_LT((*part)[i - 1].tokens[0], (*part)[i].tokens[0]);  // original order kept
      }
    }
  }
  EXPECT_EQ(firsts.size(), 40u);
  const auto again = split_train_val(numbered_samples(40), 0.1, 42);
  const auto other = split_train_val(numbered_samples(40), 0.1, 43);
  std::vector<int32_t> v1, v2, v3;
  for (const auto& s : split.val) v1.push_back(s.tokens[0]);
  for (const auto& s : again.val) v2.push_back(s.tokens[0]);
  for (const auto& s : other.val) v3.push_back(s.tokens[0]);
  EXPECT_EQ(v1, v2);
  EXPECT_NE(v1, v3);
  EXPECT_EQ(split_train_val(numbered_samples(5), 0.01, 1).val.size(), 1u);  // at least one
  EXPECT_EQ(split_train_val(numbered_samples(5), 0.0, 1).val.size(), 0u);
  EXPECT_THROW(split_train_val(numbered_samples(5), 1.0, 1), DataError);
}

}  // namespace
}  // namespace mtrain::data
