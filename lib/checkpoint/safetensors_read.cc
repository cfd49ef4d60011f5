// SafetensorsFile: opens a file through the FileSystem seam, bounds-checks
// the header length, hands the header to detail::parse_safetensors_header and
// reads tensor elements (optionally converted to fp32) into caller buffers.
#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <stdexcept>

#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_header.h"
#include "common/errors.h"
#include "fmt/format.h"

namespace mtrain::checkpoint {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; so is the host");

constexpr int64_t kConvertChunk = 1 << 15;  // 16-bit elements staged per read when converting to fp32

[[noreturn]] void fail_io(const std::string& path, const IoError& e) {
  throw CheckpointError(fmt::format("cannot read checkpoint file {}: {}", path, e.what()));
}

uint64_t decode_le64(const std::array<std::byte, 8>& b) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v |= static_cast<uint64_t>(b[i]) << (8 * i);
  return v;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(FileSystem& fs, const std::string& path, const SafetensorsLimits& limits) {
  SafetensorsFile f;
  f.path_ = path;
  std::string header;
  try {
    f.file_ = fs.open_for_read(path);
    f.file_size_ = f.file_->size();
    if (f.file_size_ < 8) {
      detail::fail_format(path,
                          fmt::format("the file is {} bytes, shorter than the 8-byte header length", f.file_size_));
    }
    std::array<std::byte, 8> len_bytes{};
    f.file_->read_at(0, len_bytes);
    const uint64_t n = decode_le64(len_bytes);
    if (n > static_cast<uint64_t>(limits.max_header_bytes)) {
      detail::fail_format(path,
                          fmt::format("header length {} bytes exceeds the {}-byte limit", n, limits.max_header_bytes));
    }
    if (n > static_cast<uint64_t>(f.file_size_ - 8)) {
      detail::fail_format(path, fmt::format("header length {} bytes exceeds the {} bytes after the length field "
                                            "(the file is {} bytes; truncated?)",
                                            n, f.file_size_ - 8, f.file_size_));
    }
    header.resize(static_cast<size_t>(n));
    f.file_->read_at(8, std::as_writable_bytes(std::span(header.data(), header.size())));
    f.data_offset_ = 8 + static_cast<int64_t>(n);
  } catch (const IoError& e) {
    fail_io(path, e);
  }
  detail::ParsedHeader parsed = detail::parse_safetensors_header(header, f.file_size_ - f.data_offset_, path, limits);
  f.tensors_ = std::move(parsed.tensors);
  f.metadata_ = std::move(parsed.metadata);
  return f;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  for (const TensorInfo& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const TensorInfo& SafetensorsFile::get(std::string_view name) const {
  if (const TensorInfo* t = find(name)) return *t;
  throw CheckpointError(
      fmt::format("{}: no tensor '{}' in the file (it holds {} tensors)", path_, name, tensors_.size()));
}

void SafetensorsFile::check_range(const TensorInfo& t, int64_t first, int64_t count, size_t out_bytes) const {
  // A TensorInfo from another file would carry offsets this file never validated.
  if (tensors_.empty() || &t < tensors_.data() || &t >= tensors_.data() + tensors_.size()) {
    throw std::invalid_argument("SafetensorsFile: TensorInfo '" + t.name + "' is not from " + path_);
  }
  if (first < 0 || count < 0 || first > t.numel - count) {
    throw CheckpointError(fmt::format("{}: elements [{}, {}) of tensor '{}' are outside its {} elements", path_, first,
                                      first + count, t.name, t.numel));
  }
  const int64_t need = count * st_dtype_size(t.dtype);  // <= t.nbytes(): no overflow
  if (static_cast<int64_t>(out_bytes) != need) {
    throw CheckpointError(fmt::format("{}: {} elements of tensor '{}' ({}) are {} bytes, the buffer holds {}", path_,
                                      count, t.name, st_dtype_name(t.dtype), need, out_bytes));
  }
}

void SafetensorsFile::read_bytes(const TensorInfo& t, int64_t first, int64_t count, std::span<std::byte> out) const {
  check_range(t, first, count, out.size());
  try {
    file_->read_at(data_offset_ + t.begin + first * st_dtype_size(t.dtype), out);
  } catch (const IoError& e) {
    fail_io(path_, e);
  }
}

void SafetensorsFile::read_f32(const TensorInfo& t, int64_t first, int64_t count, std::span<float> out) const {
  if (!st_dtype_is_float16_or_32(t.dtype)) {
    throw CheckpointError(fmt::format("{}: tensor '{}' has dtype {}; only F32, BF16 and F16 read as fp32", path_,
                                      t.name, st_dtype_name(t.dtype)));
  }
  if (t.dtype == StDType::kF32) {
    read_bytes(t, first, count, std::as_writable_bytes(out));
    return;
  }
  check_range(t, first, count, out.size() * 2);
  std::vector<uint16_t> staged(static_cast<size_t>(std::min(count, kConvertChunk)));
  for (int64_t i0 = 0; i0 < count; i0 += kConvertChunk) {
    const int64_t m = std::min(kConvertChunk, count - i0);
    read_bytes(t, first + i0, m, std::as_writable_bytes(std::span(staged.data(), static_cast<size_t>(m))));
    float* dst = out.data() + i0;
    if (t.dtype == StDType::kBF16) {
      for (int64_t i = 0; i < m; ++i) dst[i] = bf16_bits_to_f32(staged[i]);
    } else {
      for (int64_t i = 0; i < m; ++i) dst[i] = f16_bits_to_f32(staged[i]);
    }
  }
}

}  // namespace mtrain::checkpoint
