// Element types of the safetensors format (its spelling: "F32", "BF16", ...)
// and the bit conversions between fp32 and the 16-bit floats a checkpoint
// stores. fp32 -> bf16/fp16 rounds to nearest, ties to even, exactly like
// kernels::round_bf16 / round_fp16 (tensor/precision.h), so a value that
// training kept representable survives a save/load bit for bit.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "tensor/tensor.h"

namespace mtrain::checkpoint {

enum class StDType : uint8_t {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kI64,
  kU64,
  kF64,
};

const char* st_dtype_name(StDType t);                           // "BF16"
std::optional<StDType> st_dtype_from_name(std::string_view s);  // exact spelling, else nullopt
int st_dtype_size(StDType t);                                   // bytes per element
bool st_dtype_is_float16_or_32(StDType t);                      // F32, BF16, F16: readable as fp32

// The safetensors dtype of mtrain's emulated storage dtype.
StDType st_dtype_of(DType t);

uint16_t f32_to_bf16_bits(float x);
float bf16_bits_to_f32(uint16_t h);
uint16_t f32_to_f16_bits(float x);  // overflows to +-inf past 65504, keeps subnormals
float f16_bits_to_f32(uint16_t h);

}  // namespace mtrain::checkpoint
