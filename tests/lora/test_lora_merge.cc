// merge_lora (lib/lora/lora_merge.h) against an fp64 reference of PEFT's
// merge, W + scale·B·A: each element is the exact value rounded once to fp32
// (the delta is summed in double, whose error over r <= 16 products is far
// below half an fp32 ulp), so the bound is half an ulp of the reference plus
// the double sum's r·2^-53 relative to the sum of |terms|.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/rng.h"
#include "lora/lora_config.h"
#include "lora/lora_merge.h"

namespace mtrain::lora {
namespace {

std::vector<float> random(int64_t n, uint64_t seed) {
  Rng r(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(2 * r.uniform() - 1);
  return v;
}

TEST(LoraMerge, IsTheExactMergeRoundedOnceToFp32) {
  const int64_t OUT = 24, IN = 40;
  for (const bool rslora : {false, true})
    for (const int64_t r : {1, 4, 16}) {
      LoraConfig c;
      c.rank = r;
      c.alpha = 32;
      c.rslora = rslora;
      const float scale = c.scaling();
      EXPECT_EQ(scale, static_cast<float>(rslora ? 32 / std::sqrt(double(r)) : 32.0 / double(r)));
      const std::vector<float> W = random(OUT * IN, 1), A = random(r * IN, 2), B = random(OUT * r, 3);
      std::vector<float> merged = W;
      merge_lora(merged.data(), A.data(), B.data(), scale, OUT, IN, r);
      for (int64_t o = 0; o < OUT; ++o)
        for (int64_t i = 0; i < IN; ++i) {
          double delta = 0, mag = 0;
          for (int64_t k = 0; k < r; ++k) {
            delta += double(B[o * r + k]) * double(A[k * IN + i]);
            mag += std::abs(double(B[o * r + k]) * double(A[k * IN + i]));
          }
          const double ref = double(W[o * IN + i]) + double(scale) * delta;
          const double bound = std::ldexp(std::abs(ref), -24) + double(r) * std::ldexp(double(scale) * mag, -52);
          EXPECT_LE(std::abs(double(merged[o * IN + i]) - ref), bound) << o << "," << i << " r=" << r;
        }
    }
}

}  // namespace
}  // namespace mtrain::lora
