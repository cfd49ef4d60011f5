// `path#N` dataset syntax and swift's dataset sampling: N below the dataset
// size takes N distinct records (a seeded random subset); N above it repeats
// the whole dataset N / size times (in order) and adds a random subset of
// N % size records. A suffix that is not all digits is part of the path.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mtrain::data {

struct DatasetSpec {
  std::string path;
  std::optional<int64_t> num_samples;  // the N of path#N
};

// Throws ConfigError for "path#0" and an N that does not fit int64.
DatasetSpec parse_dataset_spec(const std::string& spec);

// Record indices (into 0..size-1) of a `num_samples` draw; dataset_index
// gives each --dataset entry its own random stream under `seed`.
std::vector<int64_t> sample_dataset_indices(int64_t size, int64_t num_samples, uint64_t seed, uint64_t dataset_index);

}  // namespace mtrain::data
