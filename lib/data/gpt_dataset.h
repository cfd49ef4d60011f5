// GptDataset: one split of one indexed dataset as Megatron's GPTDataset
// serves it: sample i is seq_length + 1 tokens read through the shuffle,
// sample and document indices (gpt_indices.h). The indices are built once
// and cached as .npy files (numpy can load them) in the cache directory
// (--data_cache_path, else <data dir>/cache/GPTDataset_indices, Megatron's
// default), named <key>-GPTDataset-<split>-{description.txt,
// document_index.npy, sample_index.npy, shuffle_index.npy}, where <key>
// hashes the description (data prefix and size, split range, samples,
// seq_length, seed). A later run with the same description reads them
// instead of rebuilding; the description file is written last, so a
// half-written cache is rebuilt.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/gpt_indices.h"
#include "data/indexed_dataset.h"

namespace mtrain::data {

struct GptDatasetOptions {
  int64_t seq_length = 0;
  uint32_t seed = 1234;
  std::string cache_dir;  // empty: <dir of the prefix>/cache/GPTDataset_indices
};

class GptDataset {
 public:
  // Sequences [begin, end) of `data` as split `split` ("train", "valid", "test").
  GptDataset(std::shared_ptr<const IndexedDataset> data, const std::string& split, int64_t begin, int64_t end,
             std::optional<int64_t> num_samples, const GptDatasetOptions& options);

  int64_t size() const { return indices_.num_samples(); }
  // seq_length + 1 tokens.
  std::vector<int32_t> sample(int64_t i) const;

  bool loaded_from_cache() const { return from_cache_; }
  const std::string& cache_prefix() const { return cache_prefix_; }  // <dir>/<key>-GPTDataset-<split>
  const GptIndices& indices() const { return indices_; }
  const IndexedDataset& data() const { return *data_; }

 private:
  bool load_cache(const std::string& description);
  void check_indices() const;  // a cache is untrusted too

  std::shared_ptr<const IndexedDataset> data_;
  int64_t begin_, end_, seq_length_;
  GptIndices indices_;
  bool from_cache_ = false;
  std::string cache_prefix_;
};

}  // namespace mtrain::data
