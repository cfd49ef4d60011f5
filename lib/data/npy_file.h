// Minimal NumPy .npy (format 1.0) files of one little-endian integer dtype,
// C order: the index cache of the GPT datasets (gpt_dataset.h) is written in
// it so `numpy.load` can inspect it, as Megatron's own cache can be.
// Reading accepts only what write_npy writes (descr, C order, shape) and
// checks the data size against the shape; anything else is a DataError.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mtrain::data {

// Writes `values` with shape (values.size() / cols, cols), or (n,) when
// cols == 0, to a temporary file that is then renamed to `path`.
void write_npy(const std::string& path, const std::vector<int64_t>& values, int64_t cols = 0);
void write_npy(const std::string& path, const std::vector<int32_t>& values);
std::vector<int64_t> read_npy_int64(const std::string& path, int64_t cols = 0);
std::vector<int32_t> read_npy_int32(const std::string& path);

// The .npy format 1.0 header (magic, version, length, dict padded so the data
// starts at a multiple of 64) for C-order data of dtype `descr` (e.g. "<f4")
// and `shape`: for writers of other dtypes (the precision dumper's tensors).
std::string npy_header(const char* descr, const std::vector<int64_t>& shape);

}  // namespace mtrain::data
