// Megatron-LM's indexed pretraining data: a prefix names <prefix>.bin (the
// token ids of every sequence, back to back, in one integer dtype) and
// <prefix>.idx (the index). Byte layout of the .idx, all little-endian, as
// megatron/core/datasets/indexed_dataset.py writes and reads it:
//   9 bytes  "MMIDIDX\0\0"            magic
//   uint64   1                        version
//   uint8    dtype code               1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 6 f64, 7 f32, 8 u16
//   uint64   S                        sequence count
//   uint64   D                        document count (= documents + 1)
//   int32[S] sequence lengths         tokens per sequence
//   int64[S] sequence pointers        byte offset of each sequence in the .bin
//   int64[D] document indices         0, end of doc 0, end of doc 1, ..., S
// preprocess_data writes one sequence per document. The files are untrusted:
// opening checks every size, pointer and index against the .bin and throws a
// DataError naming the file and what is wrong, so reads afterwards cannot go
// out of bounds.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace mtrain::data {

enum class IndexedDType : uint8_t {
  kUInt8 = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat64 = 6,
  kFloat32 = 7,
  kUInt16 = 8,
};
int64_t indexed_dtype_size(IndexedDType dtype);
const char* indexed_dtype_name(IndexedDType dtype);
// Megatron's DType.optimal_dtype: uint16 when vocab_size < 65500, else int32.
IndexedDType optimal_indexed_dtype(int64_t vocab_size);

inline std::string indexed_bin_path(const std::string& prefix) { return prefix + ".bin"; }
inline std::string indexed_idx_path(const std::string& prefix) { return prefix + ".idx"; }
inline constexpr int64_t kIndexedHeaderBytes = 34;  // magic 9 + version 8 + dtype 1 + counts 16

class IndexedDataset {
 public:
  // Opens and validates <prefix>.idx and <prefix>.bin (the .bin is mmapped).
  explicit IndexedDataset(const std::string& prefix);
  ~IndexedDataset();
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  const std::string& prefix() const { return prefix_; }
  IndexedDType dtype() const { return dtype_; }
  int64_t num_sequences() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t num_documents() const { return static_cast<int64_t>(doc_indices_.size()) - 1; }
  std::span<const int32_t> sequence_lengths() const { return lengths_; }
  std::span<const int64_t> sequence_pointers() const { return pointers_; }
  std::span<const int64_t> document_indices() const { return doc_indices_; }

  // Tokens [offset, offset + length) of sequence `seq` appended to `out`.
  // Throws DataError for a range outside the sequence or a token that does
  // not fit int32 (int64 data).
  void read(int64_t seq, int64_t offset, int64_t length, std::vector<int32_t>& out) const;
  std::vector<int32_t> get(int64_t seq) const;

 private:
  std::string prefix_;
  IndexedDType dtype_ = IndexedDType::kUInt16;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> pointers_;
  std::vector<int64_t> doc_indices_;
  const unsigned char* bin_ = nullptr;  // mmapped .bin (null when empty)
  int64_t bin_size_ = 0;
};

// Megatron's IndexedDatasetBuilder: appends sequences to the .bin as they
// come and writes the .idx on finalize().
class IndexedDatasetBuilder {
 public:
  IndexedDatasetBuilder(const std::string& bin_path, IndexedDType dtype);
  ~IndexedDatasetBuilder();
  // One sequence. Throws DataError for a token the dtype cannot hold.
  void add_item(std::span<const int32_t> tokens);
  // A document of consecutive sequences (lengths sum to tokens.size()).
  void add_document(std::span<const int32_t> tokens, std::span<const int32_t> lengths);
  void end_document();  // closes a document made of add_item() calls
  // Flushes the .bin and writes the index to idx_path.
  void finalize(const std::string& idx_path);
  int64_t bytes_written() const { return bytes_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  IndexedDType dtype_;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> doc_indices_{0};
  int64_t bytes_ = 0;
};

}  // namespace mtrain::data
