// dtype names and sizes, and the fp32 <-> bf16/fp16 bit conversions: decoding
// an encoded value equals the training-side rounding (kernels::round_bf16 /
// round_fp16) bit for bit, and every 16-bit pattern survives decode + encode.
#include "checkpoint/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "tensor/precision.h"

namespace mtrain::checkpoint {
namespace {

TEST(StDType, NamesAndSizes) {
  for (int i = 0; i <= static_cast<int>(StDType::kF64); ++i) {
    const auto t = static_cast<StDType>(i);
    ASSERT_EQ(st_dtype_from_name(st_dtype_name(t)), t) << st_dtype_name(t);
  }
  EXPECT_EQ(st_dtype_size(StDType::kBF16), 2);
  EXPECT_EQ(st_dtype_size(StDType::kI64), 8);
  EXPECT_EQ(st_dtype_size(StDType::kF8E4M3), 1);
  EXPECT_EQ(std::string(st_dtype_name(StDType::kF8E5M2)), "F8_E5M2");
  EXPECT_FALSE(st_dtype_from_name("f32"));
  EXPECT_FALSE(st_dtype_from_name("F32 "));
  EXPECT_FALSE(st_dtype_from_name(""));
  EXPECT_EQ(st_dtype_of(DType::kBF16), StDType::kBF16);
}

TEST(StDType, KnownBitPatterns) {
  EXPECT_EQ(f32_to_bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16_bits(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16_bits(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16_bits(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16_bits(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16_bits(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16_bits(65520.0f), 0x7c00);  // the tie rounds to even: infinity
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: zero
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(3.0f, -26)), 0x0001);
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(f16_bits_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(bf16_bits_to_f32(0x3f80), 1.0f);
}

bool same_or_both_nan(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

TEST(StDType, EncodeDecodeEqualsTrainingRounding) {
  std::mt19937 gen(11);
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           1e-45f,
                           -1e-40f,
                           6e-8f,
                           3e-8f,
                           65504.0f,
                           65519.99f,
                           65520.0f,
                           1e30f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::max()};
  for (int i = 0; i < 300000; ++i) xs.push_back(std::bit_cast<float>(static_cast<uint32_t>(gen())));
  std::normal_distribution<float> normal(0.0f, 1e-4f);
  for (int i = 0; i < 100000; ++i) xs.push_back(normal(gen));  // the fp16 subnormal range
  for (float x : xs) {
    ASSERT_TRUE(same_or_both_nan(bf16_bits_to_f32(f32_to_bf16_bits(x)), kernels::round_bf16(x))) << x;
    ASSERT_TRUE(same_or_both_nan(f16_bits_to_f32(f32_to_f16_bits(x)), kernels::round_fp16(x))) << x;
  }
}

TEST(StDType, Every16BitPatternRoundTrips) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const auto b = static_cast<uint16_t>(h);
    const float fb = bf16_bits_to_f32(b);
    const float fh = f16_bits_to_f32(b);
    if (std::isnan(fb)) {
      ASSERT_TRUE(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(fb))));
    } else {
      ASSERT_EQ(f32_to_bf16_bits(fb), b) << h;
    }
    if (std::isnan(fh)) {
      ASSERT_TRUE(std::isnan(f16_bits_to_f32(f32_to_f16_bits(fh))));
    } else {
      ASSERT_EQ(f32_to_f16_bits(fh), b) << h;
    }
  }
}

}  // namespace
}  // namespace mtrain::checkpoint
