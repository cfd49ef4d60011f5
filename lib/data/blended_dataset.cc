// Megatron data blends (blended_dataset.h).
#include "data/blended_dataset.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "common/errors.h"

namespace mtrain::data {

namespace {

std::optional<double> as_number(const std::string& s) {
  size_t used = 0;
  try {
    const double v = std::stod(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

}  // namespace

DataPathBlend parse_data_path(const std::vector<std::string>& words) {
  const char* hint = "give prefixes (--data_path a b) or weight-prefix pairs (--data_path 0.3 a 0.7 b)";
  DataPathBlend b;
  if (words.empty()) throw ConfigError("--data_path is empty", hint);
  const bool weighted = words.size() % 2 == 0 && as_number(words[0]).has_value();
  for (size_t i = 0; i < words.size(); ++i) {
    if (!weighted) {
      if (as_number(words[i]))
        throw ConfigError(fmt::format("--data_path: '{}' looks like a weight but the entries are not weight-prefix "
                                      "pairs",
                                      words[i]),
                          hint);
      b.prefixes.push_back(words[i]);
      continue;
    }
    const auto w = as_number(words[i]);
    if (!w) throw ConfigError(fmt::format("--data_path: expected a weight before '{}'", words[i]), hint);
    if (!(*w > 0) || !std::isfinite(*w))
      throw ConfigError(fmt::format("--data_path: weight {} of {} must be > 0", words[i], words[i + 1]), hint);
    if (as_number(words[i + 1]))
      throw ConfigError(fmt::format("--data_path: expected a prefix after weight {}, got '{}'", words[i], words[i + 1]),
                        hint);
    b.weights.push_back(*w);
    b.prefixes.push_back(words[++i]);
  }
  if (b.prefixes.size() > static_cast<size_t>(std::numeric_limits<int16_t>::max()))
    throw ConfigError(fmt::format("--data_path: {} datasets, at most 32767", b.prefixes.size()));
  const double sum = std::accumulate(b.weights.begin(), b.weights.end(), 0.0);
  for (double& w : b.weights) w /= sum;
  return b;
}

void build_blending_indices(std::span<const double> weights, int64_t size, std::vector<int16_t>& dataset_index,
                            std::vector<int64_t>& dataset_sample_index) {
  dataset_index.assign(size, 0);
  dataset_sample_index.assign(size, 0);
  std::vector<int64_t> taken(weights.size(), 0);
  for (int64_t i = 0; i < size; ++i) {
    const double at = std::max(static_cast<double>(i), 1.0);
    size_t best = 0;
    double best_error = weights[0] * at - static_cast<double>(taken[0]);
    for (size_t d = 1; d < weights.size(); ++d) {
      const double error = weights[d] * at - static_cast<double>(taken[d]);
      if (error > best_error) {
        best_error = error;
        best = d;
      }
    }
    dataset_index[i] = static_cast<int16_t>(best);
    dataset_sample_index[i] = taken[best]++;
  }
}

std::vector<int64_t> blend_dataset_sizes(std::span<const double> weights, int64_t size) {
  std::vector<int64_t> out;
  for (double w : weights)
    out.push_back(static_cast<int64_t>(std::ceil(std::ceil(static_cast<double>(size) * w) * 1.005)));
  return out;
}

BlendedGptDataset::BlendedGptDataset(std::vector<GptDataset> datasets, std::vector<double> weights, int64_t size)
    : datasets_(std::move(datasets)), size_(size) {
  build_blending_indices(weights, size, dataset_index_, dataset_sample_index_);
  for (int64_t i = 0; i < size; ++i)
    if (dataset_sample_index_[i] >= datasets_[dataset_index_[i]].size())
      throw DataError(fmt::format("{}: the blend needs sample {} but the dataset has {}",
                                  datasets_[dataset_index_[i]].data().prefix(), dataset_sample_index_[i],
                                  datasets_[dataset_index_[i]].size()),
                      "an unweighted --data_path provides one epoch of each dataset: give weights to repeat data");
}

std::vector<int32_t> BlendedGptDataset::sample(int64_t i) const {
  if (i < 0 || i >= size_)
    throw DataError(fmt::format("--data_path: sample {} requested, the blend has {}", i, size_),
                    "raise the sample count the datasets are built for (--train_iters)");
  return datasets_[dataset_index_[i]].sample(dataset_sample_index_[i]);
}

std::unique_ptr<BlendedGptDataset> build_indexed_split(const DataPathBlend& blend,
                                                       const std::vector<std::shared_ptr<const IndexedDataset>>& data,
                                                       const IndexedSplitOptions& o, int split_id,
                                                       std::optional<int64_t> num_samples) {
  static const char* names[] = {"train", "valid", "test"};
  const bool weighted = !blend.weights.empty() && num_samples;
  const std::vector<int64_t> sizes =
      weighted ? blend_dataset_sizes(blend.weights, *num_samples) : std::vector<int64_t>{};
  std::vector<GptDataset> parts;
  std::vector<double> weights;
  for (size_t d = 0; d < data.size(); ++d) {
    const std::array<int64_t, 4> b = split_bounds(o.split, data[d]->num_sequences());
    if (b[split_id] == b[split_id + 1]) {
      if (split_id == 0)
        throw DataError(fmt::format("{}: the train split of --split is empty ({} documents)", data[d]->prefix(),
                                    data[d]->num_sequences()),
                        "give the train part of --split more weight, or use more documents");
      return nullptr;
    }
    // One dataset without weights is used directly with the requested samples.
    std::optional<int64_t> n = weighted ? std::optional<int64_t>(sizes[d]) : std::nullopt;
    if (data.size() == 1 && blend.weights.empty()) n = num_samples;
    parts.emplace_back(data[d], names[split_id], b[split_id], b[split_id + 1], n, o.gpt);
    weights.push_back(weighted ? blend.weights[d] : static_cast<double>(parts.back().size()));
  }
  int64_t size = num_samples.value_or(0);
  if (!weighted) {
    const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
    if (!num_samples) size = static_cast<int64_t>(total);
    for (double& w : weights) w /= total;
  }
  return std::make_unique<BlendedGptDataset>(std::move(parts), std::move(weights), size);
}

}  // namespace mtrain::data
