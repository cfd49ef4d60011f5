// The index arithmetic of Megatron-LM's GPTDataset (megatron/core/datasets/
// gpt_dataset.py and helpers.cpp), on plain arrays so it can be tested alone:
//  - split: "969,30,1" -> train/valid/test ranges of sequence ids
//    (get_split_indices: cumulative round(fraction * n), shifted so the
//    last bound is exactly n);
//  - document index: the split's sequence ids repeated for as many epochs as
//    the requested samples need, shuffled (the last epoch shuffled on its own
//    when it is used for less than 80 % of it: separate_final_epoch);
//  - sample index: (num_samples + 1, 2) rows [position in the document index,
//    token offset]; sample i spans rows i .. i+1 of the token stream, i.e.
//    seq_length + 1 tokens (one shared with the next sample);
//  - shuffle index: a permutation of the samples (again split at the final
//    epoch).
// Shuffles use NumpyRandomState(seed), the same draws as Megatron's numpy.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/numpy_random.h"

namespace mtrain::data {

// "969,30,1" / "98,2" / "1" -> three fractions summing to 1. Throws
// ConfigError for anything but one to three non-negative numbers with a
// positive sum.
std::array<double, 3> parse_split(const std::string& text);
// Bounds [b0=0, b1, b2, b3=n] of the three splits of n elements.
std::array<int64_t, 4> split_bounds(const std::array<double, 3>& split, int64_t n);

struct GptIndices {
  std::vector<int32_t> document_index;  // (epochs * split sequences) sequence ids
  std::vector<int64_t> sample_index;    // (num_samples + 1, 2) flattened
  std::vector<int64_t> shuffle_index;   // (num_samples)
  int64_t num_samples() const { return static_cast<int64_t>(shuffle_index.size()); }
};

// Epochs needed for num_samples windows (1 when not given).
int64_t gpt_num_epochs(int64_t tokens_per_epoch, int64_t seq_length, std::optional<int64_t> num_samples);

std::vector<int32_t> build_document_index(std::span<const int32_t> sequences, int64_t num_epochs, NumpyRandomState& rng,
                                          bool separate_final_epoch);
// `lengths`: tokens of every sequence of the dataset (indexed by sequence id).
std::vector<int64_t> build_sample_index(std::span<const int32_t> lengths, std::span<const int32_t> document_index,
                                        int64_t seq_length, int64_t num_epochs, int64_t tokens_per_epoch);
std::vector<int64_t> build_shuffle_index(int64_t num_samples, int64_t total_size, NumpyRandomState& rng);

// All three for the sequences [begin, end) of `lengths`. Throws DataError
// (naming `what`) when the range holds fewer tokens than one sample.
GptIndices build_gpt_indices(std::span<const int32_t> lengths, int64_t begin, int64_t end, int64_t seq_length,
                             std::optional<int64_t> num_samples, uint32_t seed, const std::string& what);

}  // namespace mtrain::data
