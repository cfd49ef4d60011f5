// Megatron GPTDataset sampling: numpy RandomState shuffles, --split bounds,
// document / sample / shuffle index properties, blends and the index cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <numeric>

#include "data/blended_dataset.h"
#include "data/gpt_dataset.h"
#include "data/gpt_indices.h"
#include "data/numpy_random.h"
#include "data_test_util.h"

namespace mtrain::data {
namespace {

std::vector<int64_t> permutation(uint32_t seed, int64_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), int64_t{0});
  NumpyRandomState rng(seed);
  rng.shuffle(v);
  return v;
}

// numpy: np.random.RandomState(0).permutation(10), RandomState(42).permutation(10).
TEST(NumpyRandomState, ShuffleMatchesNumpyRandomState) {
  EXPECT_EQ(permutation(0, 10), (std::vector<int64_t>{2, 8, 4, 9, 1, 6, 7, 3, 0, 5}));
  EXPECT_EQ(permutation(42, 10), (std::vector<int64_t>{8, 1, 5, 0, 7, 2, 9, 4, 3, 6}));
}

TEST(Split, ParsesAndNormalisesLikeMegatron) {
  const auto s = parse_split("969,30,1");
  EXPECT_DOUBLE_EQ(s[0], 0.969);
  EXPECT_DOUBLE_EQ(s[2], 0.001);
  EXPECT_EQ(parse_split("98,2")[2], 0.0);
  EXPECT_EQ(split_bounds(s, 1000), (std::array<int64_t, 4>{0, 969, 999, 1000}));
  EXPECT_EQ(split_bounds(s, 10), (std::array<int64_t, 4>{0, 10, 10, 10}));
  // Rounding falls one short: every bound moves up (get_split_indices).
  EXPECT_EQ(split_bounds(parse_split("1,1,1"), 7), (std::array<int64_t, 4>{0, 3, 5, 7}));
  for (const char* bad : {"", "a,b", "1,2,3,4", "-1,2", "0,0", "1,,2", "nan"})
    EXPECT_THROW(parse_split(bad), ConfigError) << bad;
}

TEST(GptIndices, EpochsCoverTheRequestedSamples) {
  EXPECT_EQ(gpt_num_epochs(100, 10, std::nullopt), 1);
  EXPECT_EQ(gpt_num_epochs(100, 10, 9), 1);   // 91 tokens
  EXPECT_EQ(gpt_num_epochs(100, 10, 10), 2);  // 101 tokens
  EXPECT_EQ(gpt_num_epochs(100, 10, 30), 4);
}

// Sample i of the unshuffled order is tokens [i*S, i*S + S] of the stream of
// the document index; every sequence appears once per epoch.
TEST(GptIndices, SamplesTileTheShuffledDocumentStream) {
  std::vector<int32_t> lengths;
  std::mt19937 rng(3);
  for (int i = 0; i < 40; ++i) lengths.push_back(1 + static_cast<int32_t>(rng() % 30));
  const int64_t S = 16;
  for (int64_t samples : {5, 37, 150}) {
    const GptIndices g = build_gpt_indices(lengths, 5, 35, S, samples, 1234, "test");
    EXPECT_GE(g.num_samples(), samples);
    std::map<int32_t, int> count;
    for (int32_t d : g.document_index) ++count[d];
    const int epochs = static_cast<int>(g.document_index.size() / 30);
    EXPECT_EQ(count.size(), 30u);
    for (auto [d, c] : count) {
      EXPECT_TRUE(d >= 5 && d < 35);
      EXPECT_EQ(c, epochs);
    }
    std::vector<int64_t> stream_doc, stream_pos;  // (document-index position, offset) of every stream token
    for (size_t p = 0; p < g.document_index.size(); ++p)
      for (int32_t t = 0; t < lengths[g.document_index[p]]; ++t) stream_doc.push_back(p), stream_pos.push_back(t);
    for (int64_t s = 0; s <= g.num_samples(); ++s) {
      ASSERT_EQ(g.sample_index[2 * s], stream_doc[s * S]) << s;
      ASSERT_EQ(g.sample_index[2 * s + 1], stream_pos[s * S]) << s;
    }
    std::vector<int64_t> sorted = g.shuffle_index;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < g.num_samples(); ++i) ASSERT_EQ(sorted[i], i);
  }
}

TEST(GptIndices, ShortFinalEpochIsShuffledSeparately) {
  std::vector<int32_t> lengths(10, 11);                                       // 110 tokens per epoch, 10 samples of 10
  const GptIndices g = build_gpt_indices(lengths, 0, 10, 10, 12, 5, "test");  // 2 epochs, 2 of 10 from the last
  ASSERT_EQ(g.document_index.size(), 20u);
  std::vector<int32_t> last(g.document_index.begin() + 10, g.document_index.end());
  std::sort(last.begin(), last.end());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(last[i], i);
  // Samples of the first epoch(s) are shuffled among themselves, the rest after them.
  const int64_t first = (10 * 11 - 1) / 10;
  for (int64_t i = 0; i < g.num_samples(); ++i) EXPECT_EQ(g.shuffle_index[i] < first, i < first) << i;
}

TEST(GptIndices, TooFewTokensIsADataError) {
  std::vector<int32_t> lengths{3, 4};
  EXPECT_THROW(build_gpt_indices(lengths, 0, 2, 8, 1, 1, "tiny"), DataError);
}

TEST(Blend, ParsesWeightedAndUnweightedDataPaths) {
  const DataPathBlend w = parse_data_path({"0.3", "a", "0.9", "b"});
  EXPECT_EQ(w.prefixes, (std::vector<std::string>{"a", "b"}));
  EXPECT_DOUBLE_EQ(w.weights[0], 0.25);
  const DataPathBlend u = parse_data_path({"a", "b"});
  EXPECT_TRUE(u.weights.empty());
  EXPECT_EQ(u.prefixes.size(), 2u);
  EXPECT_THROW(parse_data_path({"0.3", "a", "b"}), ConfigError);
  EXPECT_THROW(parse_data_path({"0.3", "a", "0.7"}), ConfigError);
  EXPECT_THROW(parse_data_path({"0", "a", "1", "b"}), ConfigError);
  EXPECT_THROW(parse_data_path({"1", "2"}), ConfigError);
  EXPECT_THROW(parse_data_path({}), ConfigError);
}

// Every prefix of the blend is within one sample of its weighted share.
TEST(Blend, GreedyChoiceTracksTheWeights) {
  const std::vector<double> w{0.2, 0.5, 0.3};
  std::vector<int16_t> di;
  std::vector<int64_t> dsi;
  build_blending_indices(w, 1000, di, dsi);
  std::vector<int64_t> taken(3, 0);
  for (int64_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(dsi[i], taken[di[i]]);
    ++taken[di[i]];
    for (int d = 0; d < 3; ++d) EXPECT_LE(std::abs(taken[d] - w[d] * (i + 1)), 1.0) << i;
  }
  EXPECT_EQ(taken, (std::vector<int64_t>{200, 500, 300}));
  EXPECT_EQ(di[0], 1);  // the largest weight goes first
  EXPECT_EQ(blend_dataset_sizes(w, 1000), (std::vector<int64_t>{201, 503, 302}));
}

// A dataset of `docs` documents with token k*100 + j at position j of document k.
std::string make_dataset(const std::string& name, int docs, int len) {
  const std::string prefix = testing::write_temp_file(name + ".keep", "") + "_" + name;
  IndexedDatasetBuilder b(indexed_bin_path(prefix), IndexedDType::kUInt16);
  for (int k = 0; k < docs; ++k) {
    std::vector<int32_t> t;
    for (int j = 0; j < len + k % 5; ++j) t.push_back(k * 100 + j);
    b.add_item(t);
    b.end_document();
  }
  b.finalize(indexed_idx_path(prefix));
  return prefix;
}

TEST(GptDataset, SamplesHaveSeqLengthPlusOneTokensAndTheCacheIsReused) {
  const auto data = std::make_shared<const IndexedDataset>(make_dataset("a", 30, 12));
  const std::string cache = std::filesystem::path(data->prefix()).parent_path() / "cache_dir";
  std::filesystem::remove_all(cache);  // a rerun starts without the last run's cache
  GptDatasetOptions o{8, 1234, cache};
  GptDataset first(data, "train", 0, 29, 50, o);
  EXPECT_FALSE(first.loaded_from_cache());
  EXPECT_TRUE(std::filesystem::exists(first.cache_prefix() + "-shuffle_index.npy"));
  GptDataset second(data, "train", 0, 29, 50, o);
  EXPECT_TRUE(second.loaded_from_cache());
  EXPECT_EQ(second.indices().shuffle_index, first.indices().shuffle_index);
  EXPECT_EQ(second.indices().sample_index, first.indices().sample_index);
  EXPECT_EQ(second.indices().document_index, first.indices().document_index);
  for (int64_t i = 0; i < first.size(); ++i) {
    const std::vector<int32_t> s = first.sample(i);
    ASSERT_EQ(s.size(), 9u);
    EXPECT_EQ(s, second.sample(i));
  }
  o.seed = 7;  // another description: built anew
  EXPECT_FALSE(GptDataset(data, "train", 0, 29, 50, o).loaded_from_cache());
  o.seed = 1234;
  std::ofstream(first.cache_prefix() + "-sample_index.npy", std::ios::binary | std::ios::trunc) << "junk";
  EXPECT_THROW(GptDataset(data, "train", 0, 29, 50, o), DataError);
}

TEST(GptDataset, BlendedSplitMixesDatasetsByWeight) {
  const std::vector<std::shared_ptr<const IndexedDataset>> data{
      std::make_shared<const IndexedDataset>(make_dataset("b1", 40, 10)),
      std::make_shared<const IndexedDataset>(make_dataset("b2", 40, 10))};
  IndexedSplitOptions o;
  o.split = parse_split("90,10,0");
  o.gpt = {8, 1, std::filesystem::path(data[0]->prefix()).parent_path() / "cache_b"};
  const DataPathBlend blend = parse_data_path({"0.25", data[0]->prefix(), "0.75", data[1]->prefix()});
  const auto train = build_indexed_split(blend, data, o, 0, 200);
  ASSERT_TRUE(train);
  EXPECT_EQ(train->size(), 200);
  EXPECT_EQ(std::count(train->dataset_index().begin(), train->dataset_index().end(), 0), 50);
  const auto valid = build_indexed_split(blend, data, o, 1, std::nullopt);
  ASSERT_TRUE(valid);
  for (int64_t i = 0; i < valid->size(); ++i)
    for (int32_t t : valid->sample(i)) EXPECT_GE(t / 100, 36);  // documents 36..39 only
  EXPECT_EQ(build_indexed_split(blend, data, o, 2, 10), nullptr);
}

}  // namespace
}  // namespace mtrain::data
