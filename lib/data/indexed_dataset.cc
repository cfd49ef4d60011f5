// Megatron .bin/.idx reader and writer (indexed_dataset.h).
#include "data/indexed_dataset.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "common/errors.h"

namespace mtrain::data {

static_assert(std::endian::native == std::endian::little, "the .bin/.idx format is little-endian");

namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr const char* kHint = "rebuild it with `mtrain preprocess_data` (or Megatron's tools/preprocess_data.py)";

[[noreturn]] void fail(const std::string& file, const std::string& reason) {
  throw DataError(fmt::format("{}: {}", file, reason), kHint);
}

bool known_dtype(uint8_t code) { return code >= 1 && code <= 8; }

// Reads a whole file; DataError naming it when it cannot be read.
std::vector<unsigned char> read_all(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw DataError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)), "check --data_path");
  std::vector<unsigned char> out;
  unsigned char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.insert(out.end(), buf, buf + n);
  const bool bad = std::ferror(f);
  std::fclose(f);
  if (bad) throw DataError(fmt::format("{}: read error", path), "check the file system");
  return out;
}

template <typename T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename T>
void copy_array(const unsigned char* p, std::vector<T>& out, uint64_t count) {
  out.resize(count);
  if (count) std::memcpy(out.data(), p, count * sizeof(T));
}

}  // namespace

int64_t indexed_dtype_size(IndexedDType d) {
  switch (d) {
    case IndexedDType::kUInt8:
    case IndexedDType::kInt8:
      return 1;
    case IndexedDType::kInt16:
    case IndexedDType::kUInt16:
      return 2;
    case IndexedDType::kInt32:
    case IndexedDType::kFloat32:
      return 4;
    case IndexedDType::kInt64:
    case IndexedDType::kFloat64:
      return 8;
  }
  return 0;
}

const char* indexed_dtype_name(IndexedDType d) {
  static const char* names[] = {"?", "uint8", "int8", "int16", "int32", "int64", "float64", "float32", "uint16"};
  const auto i = static_cast<uint8_t>(d);
  return i <= 8 ? names[i] : "?";
}

IndexedDType optimal_indexed_dtype(int64_t vocab_size) {
  return vocab_size < 65500 ? IndexedDType::kUInt16 : IndexedDType::kInt32;
}

IndexedDataset::IndexedDataset(const std::string& prefix) : prefix_(prefix) {
  const std::string idx = indexed_idx_path(prefix), bin = indexed_bin_path(prefix);
  const std::vector<unsigned char> b = read_all(idx);
  const uint64_t size = b.size();
  if (size < kIndexedHeaderBytes) fail(idx, fmt::format("truncated header ({} bytes, need {})", size, 34));
  if (std::memcmp(b.data(), kMagic, 9) != 0) fail(idx, "bad magic (not a Megatron MMIDIDX index file)");
  if (const auto v = load<uint64_t>(b.data() + 9); v != 1) fail(idx, fmt::format("unsupported version {} (want 1)", v));
  const uint8_t code = b[17];
  if (!known_dtype(code)) fail(idx, fmt::format("unknown dtype code {}", code));
  dtype_ = static_cast<IndexedDType>(code);
  if (dtype_ == IndexedDType::kFloat32 || dtype_ == IndexedDType::kFloat64)
    fail(idx, fmt::format("dtype {} cannot hold token ids", indexed_dtype_name(dtype_)));
  const uint64_t S = load<uint64_t>(b.data() + 18), D = load<uint64_t>(b.data() + 26);
  // Each count is bounded by the file size before any multiplication can overflow.
  if (S > size || D > size || kIndexedHeaderBytes + S * 12 + D * 8 != size)
    fail(idx, fmt::format("size {} bytes does not match {} sequences and {} document indices (expected {})", size, S, D,
                          S > size || D > size ? std::string("more than the file")
                                               : std::to_string(kIndexedHeaderBytes + S * 12 + D * 8)));
  const unsigned char* p = b.data() + kIndexedHeaderBytes;
  copy_array(p, lengths_, S);
  copy_array(p + S * 4, pointers_, S);
  copy_array(p + S * 12, doc_indices_, D);

  struct stat st {};
  const int fd = ::open(bin.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    throw DataError(fmt::format("{}: cannot open: {}", bin, why), "the .bin must sit beside the .idx");
  }
  bin_size_ = st.st_size;
  const int64_t item = indexed_dtype_size(dtype_);
  int64_t expect = 0;  // Megatron writes the sequences back to back
  for (uint64_t i = 0; i < S; ++i) {
    if (lengths_[i] < 0) fail(idx, fmt::format("sequence {} has negative length {}", i, lengths_[i]));
    if (pointers_[i] != expect)
      fail(idx, fmt::format("sequence {} pointer {} does not follow the previous sequence (expected {})", i,
                            pointers_[i], expect));
    expect += int64_t{lengths_[i]} * item;
    if (expect > bin_size_) break;
  }
  if (expect != bin_size_)
    fail(bin, fmt::format("size {} bytes does not match the index ({} sequences need {} bytes of {})", bin_size_, S,
                          expect, indexed_dtype_name(dtype_)));
  if (D < 1 || doc_indices_[0] != 0) fail(idx, "document indices must start with 0");
  for (uint64_t i = 1; i < D; ++i)
    if (doc_indices_[i] < doc_indices_[i - 1])
      fail(idx, fmt::format("document indices are not monotonic at {} ({} after {})", i, doc_indices_[i],
                            doc_indices_[i - 1]));
  if (static_cast<uint64_t>(doc_indices_.back()) != S)
    fail(idx, fmt::format("last document index {} is not the sequence count {}", doc_indices_.back(), S));
  if (bin_size_ > 0) {
    void* m = ::mmap(nullptr, static_cast<size_t>(bin_size_), PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      ::close(fd);
      throw DataError(fmt::format("{}: mmap failed: {}", bin, std::strerror(errno)), "check the file system");
    }
    bin_ = static_cast<const unsigned char*>(m);
  }
  ::close(fd);
}

IndexedDataset::~IndexedDataset() {
  if (bin_) ::munmap(const_cast<unsigned char*>(bin_), static_cast<size_t>(bin_size_));
}

void IndexedDataset::read(int64_t seq, int64_t offset, int64_t length, std::vector<int32_t>& out) const {
  if (seq < 0 || seq >= num_sequences() || offset < 0 || length < 0 || offset + length > lengths_[seq])
    throw DataError(fmt::format("{}: read of tokens [{}, {}) outside sequence {}", indexed_bin_path(prefix_), offset,
                                offset + length, seq),
                    "the dataset indices do not fit this data; delete the index cache");
  const int64_t item = indexed_dtype_size(dtype_);
  const unsigned char* p = bin_ + pointers_[seq] + offset * item;
  out.reserve(out.size() + length);
  for (int64_t i = 0; i < length; ++i, p += item) {
    int64_t v = 0;
    switch (dtype_) {
      case IndexedDType::kUInt8:
        v = *p;
        break;
      case IndexedDType::kInt8:
        v = load<int8_t>(p);
        break;
      case IndexedDType::kInt16:
        v = load<int16_t>(p);
        break;
      case IndexedDType::kUInt16:
        v = load<uint16_t>(p);
        break;
      case IndexedDType::kInt32:
        v = load<int32_t>(p);
        break;
      default:
        v = load<int64_t>(p);
        break;
    }
    if (v < 0 || v > std::numeric_limits<int32_t>::max())
      throw DataError(fmt::format("{}: token {} of sequence {} is {}, not a token id", indexed_bin_path(prefix_),
                                  offset + i, seq, v),
                      kHint);
    out.push_back(static_cast<int32_t>(v));
  }
}

std::vector<int32_t> IndexedDataset::get(int64_t seq) const {
  std::vector<int32_t> out;
  read(seq, 0, seq >= 0 && seq < num_sequences() ? lengths_[seq] : 0, out);
  return out;
}

}  // namespace mtrain::data
