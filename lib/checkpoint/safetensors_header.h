// Internal to lib/checkpoint: strict validation of a safetensors JSON header
// (the bytes after the 8-byte length) against the size of the data section.
// Kept apart from the file I/O so that the rules live in one readable place.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/safetensors.h"

namespace mtrain::checkpoint::detail {

struct ParsedHeader {
  std::vector<TensorInfo> tensors;  // sorted by data offset
  SafetensorsMetadata metadata;
};

// Throws CheckpointError "<path>: invalid safetensors file: <what>".
ParsedHeader parse_safetensors_header(std::string_view header, int64_t data_size, const std::string& path,
                                      const SafetensorsLimits& limits);

[[noreturn]] void fail_format(const std::string& path, const std::string& what);

}  // namespace mtrain::checkpoint::detail
