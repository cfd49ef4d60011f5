// numpy.random.RandomState(seed).shuffle, reproduced: Megatron's GPTDataset
// shuffles its document and sample indices with it, so the same seed gives
// the same sample order as Megatron-LM. RandomState is MT19937 seeded with
// init_genrand(seed) (what std::mt19937(seed) does), and its legacy shuffle
// is Fisher-Yates from the back, drawing j in [0, i] by masked rejection
// (numpy's random_interval: 32-bit draws while i fits 32 bits, else 64-bit
// draws made of two 32-bit outputs, high word first).
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace mtrain::data {

class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed) : mt_(seed) {}

  // A uniform integer in [0, max] (numpy random_interval).
  uint64_t interval(uint64_t max);

  // In place, as RandomState.shuffle does for a 1-D array.
  template <typename T>
  void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i-- > 1;) std::swap(v[i], v[interval(i)]);
  }

 private:
  std::mt19937 mt_;
};

}  // namespace mtrain::data
