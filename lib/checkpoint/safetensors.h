// The safetensors file format (huggingface/safetensors), written and read
// through the FileSystem seam:
//   8 bytes   N, unsigned little-endian: the header length
//   N bytes   UTF-8 JSON object, starting with '{', padded with spaces:
//             {"__metadata__": {"k": "v", ...},            (optional, strings only)
//              "<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]}, ...}
//   the rest  the data section; [b, e) is relative to its start, row-major,
//             little-endian, e - b == numel * dtype size; the tensors tile the
//             section exactly: no overlap, no hole, nothing after the last one.
// The writer pads the header so that the data section starts at a multiple
// of 8 bytes and writes the file atomically (common/atomic_file.h).
//
// The reader treats the file as untrusted: the header length is checked
// against the file size and a cap, the JSON strictly (duplicate keys, unknown
// fields, nesting), every dtype, shape, numel and offset before any use, with
// overflow-checked arithmetic. Every error is a CheckpointError that names the
// file and says what is wrong, with the expected and the actual value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/checksum.h"
#include "checkpoint/dtype.h"
#include "common/file_system.h"
#include "tensor/tensor.h"

namespace mtrain::checkpoint {

using SafetensorsMetadata = std::map<std::string, std::string>;

// One tensor to write: either raw little-endian bytes already in `dtype`, or
// numel fp32 values stored as `dtype` (F32, or BF16/F16 rounded to nearest even).
struct TensorToWrite {
  std::string name;
  StDType dtype = StDType::kF32;
  Shape shape;
  std::span<const std::byte> bytes;  // raw form
  const float* f32 = nullptr;        // fp32 form (when non-null)

  static TensorToWrite from_bytes(std::string name, StDType dtype, Shape shape, std::span<const std::byte> bytes);
  static TensorToWrite from_f32(std::string name, Shape shape, const float* values, StDType stored = StDType::kF32);
};

struct WrittenFile {
  std::string path;
  FileDigest digest;  // size and CRC-32 of the whole file, for the manifest
};

// Writes `tensors` (in this order in the data section) atomically to `path`.
// Throws CheckpointError: invalid input (duplicate or reserved name, byte
// count != numel * dtype size, fp32 values for an integer dtype) or an I/O
// failure, naming the path, the bytes written and needed, and the free space.
// `on_tensor(i)` (if set) is called once tensor i's bytes are written (a
// progress line's count).
WrittenFile write_safetensors(FileSystem& fs, const std::string& path, std::span<const TensorToWrite> tensors,
                              const SafetensorsMetadata& metadata = {}, mode_t mode = kDefaultFileMode,
                              const std::function<void(size_t)>& on_tensor = {});

// The JSON header write_safetensors writes (space-padded, without the 8-byte length).
std::string safetensors_header(std::span<const TensorToWrite> tensors, const SafetensorsMetadata& metadata);

struct TensorInfo {
  std::string name;
  StDType dtype = StDType::kF32;
  Shape shape;
  int64_t numel = 0;
  int64_t begin = 0;  // byte offsets relative to the data section
  int64_t end = 0;
  int64_t nbytes() const { return end - begin; }
};

struct SafetensorsLimits {
  int64_t max_header_bytes = 100 << 20;  // the reference implementation's cap
  int max_rank = 64;
};

class SafetensorsFile {
 public:
  // Opens `path` and validates its header. Throws CheckpointError.
  static SafetensorsFile open(FileSystem& fs, const std::string& path, const SafetensorsLimits& limits = {});

  const std::string& path() const { return path_; }
  int64_t file_size() const { return file_size_; }
  int64_t data_offset() const { return data_offset_; }                 // absolute offset of the data section
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // in data order
  const SafetensorsMetadata& metadata() const { return metadata_; }
  const TensorInfo* find(std::string_view name) const;  // nullptr if absent
  const TensorInfo& get(std::string_view name) const;   // throws CheckpointError if absent

  // Raw bytes of elements [first, first + count) of `t`; out.size() must be count * dtype size.
  void read_bytes(const TensorInfo& t, int64_t first, int64_t count, std::span<std::byte> out) const;
  void read_bytes(const TensorInfo& t, std::span<std::byte> out) const { read_bytes(t, 0, t.numel, out); }
  // Elements [first, first + count) as fp32 (from F32, BF16 or F16); out.size() must be count.
  void read_f32(const TensorInfo& t, int64_t first, int64_t count, std::span<float> out) const;
  void read_f32(const TensorInfo& t, std::span<float> out) const { read_f32(t, 0, t.numel, out); }

 private:
  SafetensorsFile() = default;
  void check_range(const TensorInfo& t, int64_t first, int64_t count, size_t out_bytes) const;

  std::string path_;
  std::unique_ptr<ReadableFile> file_;
  int64_t file_size_ = 0;
  int64_t data_offset_ = 0;
  std::vector<TensorInfo> tensors_;
  SafetensorsMetadata metadata_;
};

}  // namespace mtrain::checkpoint
