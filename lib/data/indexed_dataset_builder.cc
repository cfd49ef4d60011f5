// Megatron IndexedDatasetBuilder: writes <prefix>.bin while sequences come in
// and the .idx (layout in indexed_dataset.h) at the end.
#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/errors.h"
#include "data/indexed_dataset.h"

namespace mtrain::data {

struct IndexedDatasetBuilder::Impl {
  std::string path;
  std::FILE* file = nullptr;
  std::vector<unsigned char> buf;  // one sequence in the on-disk dtype
};

namespace {

[[noreturn]] void write_failed(const std::string& path) {
  throw DataError(fmt::format("{}: write failed: {}", path, std::strerror(errno)), "check free disk space");
}

template <typename T>
void put(std::vector<unsigned char>& out, T v) {
  const auto* p = reinterpret_cast<const unsigned char*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

// Appends `token` in `dtype`; false when the dtype cannot hold it.
bool put_token(std::vector<unsigned char>& out, IndexedDType dtype, int32_t token) {
  switch (dtype) {
    case IndexedDType::kUInt8:
      return token >= 0 && token <= 255 && (put<uint8_t>(out, token), true);
    case IndexedDType::kInt8:
      return token >= -128 && token <= 127 && (put<int8_t>(out, token), true);
    case IndexedDType::kInt16:
      return token >= -32768 && token <= 32767 && (put<int16_t>(out, token), true);
    case IndexedDType::kUInt16:
      return token >= 0 && token <= 65535 && (put<uint16_t>(out, token), true);
    case IndexedDType::kInt32:
      return put<int32_t>(out, token), true;
    case IndexedDType::kInt64:
      return put<int64_t>(out, token), true;
    default:
      return false;
  }
}

}  // namespace

IndexedDatasetBuilder::IndexedDatasetBuilder(const std::string& bin_path, IndexedDType dtype)
    : impl_(std::make_unique<Impl>()), dtype_(dtype) {
  if (dtype == IndexedDType::kFloat32 || dtype == IndexedDType::kFloat64)
    throw DataError(fmt::format("{}: dtype {} cannot hold token ids", bin_path, indexed_dtype_name(dtype)));
  impl_->path = bin_path;
  impl_->file = std::fopen(bin_path.c_str(), "wb");
  if (!impl_->file)
    throw DataError(fmt::format("{}: cannot create: {}", bin_path, std::strerror(errno)),
                    "check --output_prefix: its directory must exist and be writable");
}

IndexedDatasetBuilder::~IndexedDatasetBuilder() {
  if (impl_->file) std::fclose(impl_->file);
}

void IndexedDatasetBuilder::add_item(std::span<const int32_t> tokens) {
  std::vector<unsigned char>& buf = impl_->buf;
  buf.clear();
  for (int32_t t : tokens)
    if (!put_token(buf, dtype_, t))
      throw DataError(fmt::format("{}: token id {} does not fit dtype {}", impl_->path, t, indexed_dtype_name(dtype_)),
                      "use a wider dtype (int32) for this vocabulary");
  if (!buf.empty() && std::fwrite(buf.data(), 1, buf.size(), impl_->file) != buf.size()) write_failed(impl_->path);
  bytes_ += static_cast<int64_t>(buf.size());
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
}

void IndexedDatasetBuilder::add_document(std::span<const int32_t> tokens, std::span<const int32_t> lengths) {
  size_t at = 0;
  for (int32_t n : lengths) {
    if (n < 0 || at + n > tokens.size())
      throw DataError(fmt::format("{}: document lengths do not add up to its {} tokens", impl_->path, tokens.size()));
    add_item(tokens.subspan(at, n));
    at += n;
  }
  if (at != tokens.size())
    throw DataError(fmt::format("{}: document lengths do not add up to its {} tokens", impl_->path, tokens.size()));
  end_document();
}

void IndexedDatasetBuilder::end_document() { doc_indices_.push_back(static_cast<int64_t>(lengths_.size())); }

void IndexedDatasetBuilder::finalize(const std::string& idx_path) {
  if (std::fclose(impl_->file) != 0) {
    impl_->file = nullptr;
    write_failed(impl_->path);
  }
  impl_->file = nullptr;
  std::vector<unsigned char> idx;
  const char magic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
  idx.insert(idx.end(), magic, magic + 9);
  put<uint64_t>(idx, 1);
  put<uint8_t>(idx, static_cast<uint8_t>(dtype_));
  put<uint64_t>(idx, lengths_.size());
  put<uint64_t>(idx, doc_indices_.size());
  for (int32_t n : lengths_) put<int32_t>(idx, n);
  int64_t pointer = 0;
  for (int32_t n : lengths_) {
    put<int64_t>(idx, pointer);
    pointer += int64_t{n} * indexed_dtype_size(dtype_);
  }
  for (int64_t d : doc_indices_) put<int64_t>(idx, d);
  std::FILE* f = std::fopen(idx_path.c_str(), "wb");
  if (!f) write_failed(idx_path);
  const bool ok = std::fwrite(idx.data(), 1, idx.size(), f) == idx.size();
  if (std::fclose(f) != 0 || !ok) write_failed(idx_path);
}

}  // namespace mtrain::data
