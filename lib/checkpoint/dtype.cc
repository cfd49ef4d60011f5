#include "checkpoint/dtype.h"

#include <array>
#include <bit>
#include <cmath>
#include <utility>

namespace mtrain::checkpoint {
namespace {

struct DTypeInfo {
  StDType type;
  const char* name;
  int size;
};

constexpr std::array<DTypeInfo, 15> kDTypes = {{
    {StDType::kBool, "BOOL", 1},
    {StDType::kU8, "U8", 1},
    {StDType::kI8, "I8", 1},
    {StDType::kF8E5M2, "F8_E5M2", 1},
    {StDType::kF8E4M3, "F8_E4M3", 1},
    {StDType::kI16, "I16", 2},
    {StDType::kU16, "U16", 2},
    {StDType::kF16, "F16", 2},
    {StDType::kBF16, "BF16", 2},
    {StDType::kI32, "I32", 4},
    {StDType::kU32, "U32", 4},
    {StDType::kF32, "F32", 4},
    {StDType::kI64, "I64", 8},
    {StDType::kU64, "U64", 8},
    {StDType::kF64, "F64", 8},
}};

const DTypeInfo& info(StDType t) { return kDTypes[static_cast<size_t>(t)]; }

constexpr uint32_t kAbsMask = 0x7fffffffu;
constexpr uint32_t kInfBits = 0x7f800000u;

}  // namespace

const char* st_dtype_name(StDType t) { return info(t).name; }
int st_dtype_size(StDType t) { return info(t).size; }

std::optional<StDType> st_dtype_from_name(std::string_view s) {
  for (const DTypeInfo& d : kDTypes) {
    if (s == d.name) return d.type;
  }
  return std::nullopt;
}

bool st_dtype_is_float16_or_32(StDType t) { return t == StDType::kF32 || t == StDType::kBF16 || t == StDType::kF16; }

StDType st_dtype_of(DType t) {
  switch (t) {
    case DType::kF32:
      return StDType::kF32;
    case DType::kBF16:
      return StDType::kBF16;
    case DType::kF16:
      return StDType::kF16;
  }
  return StDType::kF32;
}

uint16_t f32_to_bf16_bits(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & kAbsMask) > kInfBits) return static_cast<uint16_t>((u | 0x00400000u) >> 16);  // NaN stays a (quiet) NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // nearest, ties to even; a carry into the exponent is right
  return static_cast<uint16_t>(u >> 16);
}

float bf16_bits_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

uint16_t f32_to_f16_bits(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & kAbsMask;
  if (a > kInfBits) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // quiet NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);                     // 65520 and up round to inf
  if (a < 0x38800000u) {
    // Below 2^-14: subnormal, quantum 2^-24. The scaled value rounds (nearest
    // even) to the mantissa; 1024 is the smallest normal, whose bits are 0x400 too.
    const float m = std::nearbyint(std::bit_cast<float>(a) * 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(m));
  }
  // Normal: keep 10 of 23 mantissa bits (nearest even), rebias the exponent 127 -> 15.
  const uint32_t r = (a + 0xfffu + ((a >> 13) & 1u)) >> 13;
  return static_cast<uint16_t>(sign | (r - (112u << 10)));
}

float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);  // exact: mant * 2^-24
    return std::bit_cast<float>(std::bit_cast<uint32_t>(v) | sign);
  }
  if (exp == 31) return std::bit_cast<float>(sign | kInfBits | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace mtrain::checkpoint
