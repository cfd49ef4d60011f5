#include "data/dataset_sample.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <numeric>

#include "common/errors.h"
#include "common/rng.h"

namespace mtrain::data {

DatasetSpec parse_dataset_spec(const std::string& spec) {
  const size_t hash = spec.rfind('#');
  if (hash == std::string::npos || hash + 1 == spec.size()) return {spec, std::nullopt};
  const std::string digits = spec.substr(hash + 1);
  if (!std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); })) {
    return {spec, std::nullopt};
  }
  int64_t n = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || n <= 0) {
    throw ConfigError("--dataset " + spec + ": the sample count after '#' must be a positive integer",
                      "write path#N, e.g. data/alpaca.jsonl#500");
  }
  return {spec.substr(0, hash), n};
}

std::vector<int64_t> sample_dataset_indices(int64_t size, int64_t num_samples, uint64_t seed, uint64_t dataset_index) {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(num_samples));
  for (int64_t r = 0; r < num_samples / size; ++r)
    for (int64_t i = 0; i < size; ++i) out.push_back(i);
  const int64_t remainder = num_samples % size;
  if (remainder == 0) return out;
  // The first `remainder` entries of a seeded Fisher-Yates permutation.
  std::vector<int64_t> order(static_cast<size_t>(size));
  std::iota(order.begin(), order.end(), int64_t{0});
  Rng rng(stream_seed(seed, /*use: dataset sampling*/ 3, dataset_index));
  for (int64_t i = size - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.next_u64() % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  out.insert(out.end(), order.begin(), order.begin() + remainder);
  return out;
}

}  // namespace mtrain::data
