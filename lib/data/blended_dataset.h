// Megatron's --data_path blends: "0.3 a 0.7 b" (weighted prefixes) or "a b"
// (unweighted), and BlendedDataset's per-sample choice of dataset: sample i
// goes to the dataset whose share so far lags its weight the most
// (helpers.cpp build_blending_indices: error_d = w_d * max(i, 1) - taken_d,
// first maximum wins), and is that dataset's next sample.
// Each weighted dataset is built with ceil(ceil(N * w) * 1.005) samples
// (Megatron's 0.5 % surplus), so the blend never runs past one of them.
// Unweighted, every dataset contributes one epoch, weighted by its size.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/gpt_dataset.h"

namespace mtrain::data {

struct DataPathBlend {
  std::vector<std::string> prefixes;
  std::vector<double> weights;  // normalised to sum 1; empty: unweighted
};
// The --data_path words. Throws ConfigError for a mix of weighted and
// unweighted entries, a missing prefix after a weight, or a weight <= 0.
DataPathBlend parse_data_path(const std::vector<std::string>& words);

// dataset_index[i] = the dataset of blended sample i, dataset_sample_index[i]
// = its sample within that dataset.
void build_blending_indices(std::span<const double> weights, int64_t size, std::vector<int16_t>& dataset_index,
                            std::vector<int64_t>& dataset_sample_index);
// Samples each weighted dataset is built with for a blend of `size`.
std::vector<int64_t> blend_dataset_sizes(std::span<const double> weights, int64_t size);

// One split (train / valid) of the whole --data_path.
class BlendedGptDataset {
 public:
  BlendedGptDataset(std::vector<GptDataset> datasets, std::vector<double> weights, int64_t size);
  int64_t size() const { return size_; }
  std::vector<int32_t> sample(int64_t i) const;
  const std::vector<GptDataset>& datasets() const { return datasets_; }
  const std::vector<int16_t>& dataset_index() const { return dataset_index_; }

 private:
  std::vector<GptDataset> datasets_;
  int64_t size_;
  std::vector<int16_t> dataset_index_;
  std::vector<int64_t> dataset_sample_index_;
};

struct IndexedSplitOptions {
  std::array<double, 3> split{1, 0, 0};
  GptDatasetOptions gpt;
};
// Split `split_id` (0 train, 1 valid, 2 test) of the blend; num_samples
// none = one epoch. Returns null when the split holds no sequences.
std::unique_ptr<BlendedGptDataset> build_indexed_split(const DataPathBlend& blend,
                                                       const std::vector<std::shared_ptr<const IndexedDataset>>& data,
                                                       const IndexedSplitOptions& options, int split_id,
                                                       std::optional<int64_t> num_samples);

}  // namespace mtrain::data
