// GptDataset: cached indices and sample reads (gpt_dataset.h).
#include "data/gpt_dataset.h"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/errors.h"
#include "common/rng.h"
#include "data/npy_file.h"

namespace mtrain::data {

namespace {

namespace fs = std::filesystem;

// A stable 64-bit key of the description (file names only; the description
// itself is compared in full before a cache is used).
std::string description_key(const std::string& text) {
  uint64_t h = 0x6d747261696e;
  for (unsigned char c : text) h = mix64(h ^ c);
  return fmt::format("{:016x}", h);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

GptDataset::GptDataset(std::shared_ptr<const IndexedDataset> data, const std::string& split, int64_t begin, int64_t end,
                       std::optional<int64_t> num_samples, const GptDatasetOptions& o)
    : data_(std::move(data)), begin_(begin), end_(end), seq_length_(o.seq_length) {
  const std::string prefix = fs::absolute(data_->prefix()).lexically_normal().string();
  const std::string description = fmt::format(
      "class: GPTDataset\ndataset_path: {}\nnum_sequences: {}\nsplit: {}\nsequence_range: [{}, {})\n"
      "num_samples: {}\nsequence_length: {}\nrandom_seed: {}\nshuffle: numpy.random.RandomState\n",
      prefix, data_->num_sequences(), split, begin, end, num_samples ? std::to_string(*num_samples) : "None",
      o.seq_length, o.seed);
  const fs::path dir =
      o.cache_dir.empty() ? fs::path(prefix).parent_path() / "cache" / "GPTDataset_indices" : fs::path(o.cache_dir);
  cache_prefix_ = (dir / fmt::format("{}-GPTDataset-{}", description_key(description), split)).string();
  if (load_cache(description)) return;
  indices_ = build_gpt_indices(data_->sequence_lengths(), begin, end, o.seq_length, num_samples, o.seed,
                               fmt::format("{} ({} split)", data_->prefix(), split));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw DataError(fmt::format("{}: cannot create the dataset index cache: {}", dir.string(), ec.message()),
                    "pass --data_cache_path <writable directory>");
  write_npy(cache_prefix_ + "-document_index.npy", indices_.document_index);
  write_npy(cache_prefix_ + "-sample_index.npy", indices_.sample_index, 2);
  write_npy(cache_prefix_ + "-shuffle_index.npy", indices_.shuffle_index);
  const std::string tmp = fmt::format("{}-description.txt.tmp.{}", cache_prefix_, ::getpid());
  std::ofstream(tmp, std::ios::binary | std::ios::trunc) << description;
  fs::rename(tmp, cache_prefix_ + "-description.txt", ec);
  if (ec) throw DataError(fmt::format("{}: cannot write: {}", tmp, ec.message()), "check --data_cache_path");
}

bool GptDataset::load_cache(const std::string& description) {
  const std::string desc_path = cache_prefix_ + "-description.txt";
  if (!fs::exists(desc_path) || read_text(desc_path) != description) return false;
  indices_.document_index = read_npy_int32(cache_prefix_ + "-document_index.npy");
  indices_.sample_index = read_npy_int64(cache_prefix_ + "-sample_index.npy", 2);
  indices_.shuffle_index = read_npy_int64(cache_prefix_ + "-shuffle_index.npy");
  check_indices();
  from_cache_ = true;
  return true;
}

void GptDataset::check_indices() const {
  const auto bad = [&](const std::string& what) {
    return DataError(fmt::format("{}: {} do not fit {}", cache_prefix_, what, data_->prefix()),
                     "delete the index cache directory; it is rebuilt on the next run");
  };
  for (int32_t d : indices_.document_index)
    if (d < begin_ || d >= end_) throw bad("document indices");
  const int64_t rows = static_cast<int64_t>(indices_.sample_index.size()) / 2;
  const auto lengths = data_->sequence_lengths();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t doc = indices_.sample_index[2 * r], off = indices_.sample_index[2 * r + 1];
    if (doc < 0 || doc >= static_cast<int64_t>(indices_.document_index.size()) || off < 0 ||
        off >= lengths[indices_.document_index[doc]])
      throw bad("sample indices");
    if (r > 0 && (doc < indices_.sample_index[2 * r - 2] ||
                  (doc == indices_.sample_index[2 * r - 2] && off <= indices_.sample_index[2 * r - 1])))
      throw bad("sample indices");
  }
  if (static_cast<int64_t>(indices_.shuffle_index.size()) != rows - 1) throw bad("shuffle indices");
  for (int64_t s : indices_.shuffle_index)
    if (s < 0 || s >= rows - 1) throw bad("shuffle indices");
}

std::vector<int32_t> GptDataset::sample(int64_t i) const {
  if (i < 0 || i >= size())
    throw DataError(fmt::format("{}: sample {} of {}", data_->prefix(), i, size()), "more samples than built");
  const int64_t s = indices_.shuffle_index[i];
  const int64_t beg = indices_.sample_index[2 * s], beg_off = indices_.sample_index[2 * s + 1];
  const int64_t end = indices_.sample_index[2 * s + 2], end_off = indices_.sample_index[2 * s + 3];
  std::vector<int32_t> out;
  out.reserve(seq_length_ + 1);
  for (int64_t d = beg; d <= end; ++d) {
    const int32_t seq = indices_.document_index[d];
    const int64_t from = d == beg ? beg_off : 0;
    const int64_t to = d == end ? end_off + 1 : data_->sequence_lengths()[seq];
    data_->read(seq, from, to - from, out);
  }
  if (static_cast<int64_t>(out.size()) != seq_length_ + 1)
    throw DataError(fmt::format("{}: sample {} has {} tokens, not --seq_length + 1 = {}", cache_prefix_, i, out.size(),
                                seq_length_ + 1),
                    "delete the index cache directory; it is rebuilt on the next run");
  return out;
}

}  // namespace mtrain::data
