// write_safetensors: validates the tensors, builds the header, streams the
// data through a checksumming file into common/atomic_file's temp+rename.
#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <set>

#include "checkpoint/safetensors.h"
#include "common/atomic_file.h"
#include "common/errors.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"

namespace mtrain::checkpoint {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; so is the host");

constexpr int64_t kConvertChunk = 1 << 15;  // elements converted per append when storing fp32 as 16-bit

[[noreturn]] void fail_input(const std::string& path, const std::string& what) {
  throw CheckpointError(fmt::format("cannot write {}: {}", path, what), "this is a bug in the caller of the writer");
}

// numel * dtype size, or -1 on a negative dimension or overflow.
int64_t checked_nbytes(const Shape& shape, StDType dtype) {
  int64_t n = st_dtype_size(dtype);
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  }
  return n;
}

void validate(const std::string& path, std::span<const TensorToWrite> tensors) {
  std::set<std::string_view> names;
  for (const TensorToWrite& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") fail_input(path, fmt::format("invalid tensor name '{}'", t.name));
    if (!names.insert(t.name).second) fail_input(path, fmt::format("tensor '{}' is given twice", t.name));
    const int64_t nbytes = checked_nbytes(t.shape, t.dtype);
    if (nbytes < 0) fail_input(path, fmt::format("tensor '{}' has an invalid shape {}", t.name, shape_str(t.shape)));
    if (t.f32 != nullptr) {
      if (!st_dtype_is_float16_or_32(t.dtype)) {
        fail_input(path,
                   fmt::format("tensor '{}': fp32 values cannot be stored as {}", t.name, st_dtype_name(t.dtype)));
      }
    } else if (static_cast<int64_t>(t.bytes.size()) != nbytes) {
      fail_input(path, fmt::format("tensor '{}' ({}, shape {}) needs {} bytes, got {}", t.name, st_dtype_name(t.dtype),
                                   shape_str(t.shape), nbytes, t.bytes.size()));
    }
  }
}

void append_le64(WritableFile& f, uint64_t v) {
  std::array<std::byte, 8> b{};
  for (size_t i = 0; i < 8; ++i) b[i] = static_cast<std::byte>((v >> (8 * i)) & 0xffu);
  f.append(b);
}

void append_f32_as(WritableFile& f, const float* x, int64_t n, StDType dtype) {
  if (dtype == StDType::kF32) {
    f.append(std::as_bytes(std::span(x, static_cast<size_t>(n))));
    return;
  }
  std::vector<uint16_t> buf(static_cast<size_t>(std::min(n, kConvertChunk)));
  for (int64_t i0 = 0; i0 < n; i0 += kConvertChunk) {
    const int64_t m = std::min(kConvertChunk, n - i0);
    for (int64_t i = 0; i < m; ++i) {
      buf[i] = dtype == StDType::kBF16 ? f32_to_bf16_bits(x[i0 + i]) : f32_to_f16_bits(x[i0 + i]);
    }
    f.append(std::as_bytes(std::span(buf.data(), static_cast<size_t>(m))));
  }
}

void append_tensor(WritableFile& f, const TensorToWrite& t) {
  if (t.f32 == nullptr) {
    f.append(t.bytes);
  } else {
    append_f32_as(f, t.f32, shape_numel(t.shape), t.dtype);
  }
}

}  // namespace

TensorToWrite TensorToWrite::from_bytes(std::string name, StDType dtype, Shape shape,
                                        std::span<const std::byte> bytes) {
  TensorToWrite t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes = bytes;
  return t;
}

TensorToWrite TensorToWrite::from_f32(std::string name, Shape shape, const float* values, StDType stored) {
  TensorToWrite t;
  t.name = std::move(name);
  t.dtype = stored;
  t.shape = std::move(shape);
  t.f32 = values;
  return t;
}

std::string safetensors_header(std::span<const TensorToWrite> tensors, const SafetensorsMetadata& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = std::move(m);
  }
  int64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    const int64_t nbytes = checked_nbytes(t.shape, t.dtype);
    h[t.name] = {{"dtype", st_dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string s = h.dump();
  // Pad with spaces so the data section (after the 8-byte length) starts 8-aligned.
  s.append((8 - s.size() % 8) % 8, ' ');
  return s;
}

WrittenFile write_safetensors(FileSystem& fs, const std::string& path, std::span<const TensorToWrite> tensors,
                              const SafetensorsMetadata& metadata, mode_t mode,
                              const std::function<void(size_t)>& on_tensor) {
  validate(path, tensors);
  const std::string header = safetensors_header(tensors, metadata);
  int64_t total = 8 + static_cast<int64_t>(header.size());
  for (const TensorToWrite& t : tensors) total += checked_nbytes(t.shape, t.dtype);

  FileDigest digest;
  int64_t written = 0;  // bytes that reached the temporary file, for the error message
  try {
    write_file_atomic(
        fs, path,
        [&](WritableFile& f) {
          ChecksummingFile cf(f);
          try {
            append_le64(cf, header.size());
            cf.append(header);
            for (size_t i = 0; i < tensors.size(); ++i) {
              append_tensor(cf, tensors[i]);
              if (on_tensor) on_tensor(i);
            }
          } catch (const IoError&) {
            written = cf.size();
            throw;
          }
          written = cf.size();
          digest = cf.digest();
        },
        mode);
  } catch (const IoError& e) {
    const int64_t free = fs.free_bytes(parent_dir(path));
    const std::string tmp = temp_path_for(path);
    std::string hint;
    if (e.path() != tmp) {  // only the directory fsync comes after the rename
      hint = fmt::format("{} was replaced, but the rename may not survive a power loss", path);
    } else if (fs.exists(tmp)) {
      hint = fmt::format("could not remove the temporary file {}; the previous {} (if any) is intact", tmp, path);
    } else {
      hint = "the previous file (if any) is intact; free disk space or save elsewhere";
    }
    throw CheckpointError(
        fmt::format("cannot write checkpoint file {}: {}; {} of {} bytes written; free space on its file system: {}",
                    path, e.what(), written, total, free < 0 ? std::string("unknown") : fmt::format("{} bytes", free)),
        hint);
  }
  if (written != total) throw std::logic_error("write_safetensors: wrote " + std::to_string(written) + " bytes");
  return {path, digest};
}

}  // namespace mtrain::checkpoint
