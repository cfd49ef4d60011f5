// numpy's random_interval over MT19937 (numpy_random.h).
#include "data/numpy_random.h"

namespace mtrain::data {

uint64_t NumpyRandomState::interval(uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  for (int s = 1; s <= 32; s *= 2) mask |= mask >> s;  // smallest all-ones mask covering max
  uint64_t value;
  if (max <= 0xffffffffULL) {
    while ((value = (mt_() & mask)) > max) {
    }
  } else {
    do {
      const uint64_t hi = mt_();
      value = ((hi << 32) | mt_()) & mask;
    } while (value > max);
  }
  return value;
}

}  // namespace mtrain::data
