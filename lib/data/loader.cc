#include "data/loader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/errors.h"
#include "common/rng.h"
#include "data/packing.h"

namespace mtrain::data {
namespace {

enum class PermutationUse : uint64_t { kEpochOrder = 1, kTrainValSplit = 2 };

// Fisher-Yates over 0..n-1 with a generator seeded from (seed, use, index).
std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed, PermutationUse use, uint64_t index) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), int64_t{0});
  Rng rng(stream_seed(seed, static_cast<uint64_t>(use), index));
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.next_u64() % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace

template <class T>
static std::vector<T> cp_rows(const std::vector<T>& x, int64_t B, int64_t T_in, int size, int rank) {
  if (x.empty()) return x;
  const int64_t c = T_in / (2 * size);
  std::vector<T> out;
  out.reserve(static_cast<size_t>(B * 2 * c));
  for (int64_t b = 0; b < B; ++b)
    for (const int64_t chunk : {int64_t{rank}, int64_t{2 * size - 1 - rank}}) {
      const auto first = x.begin() + b * T_in + chunk * c;
      out.insert(out.end(), first, first + c);
    }
  return out;
}

Batch context_parallel_slice(const Batch& b, int size, int rank) {
  if (size < 1 || rank < 0 || rank >= size || b.T % (2 * size) != 0)
    throw Error(ExitCode::kInternal,
                fmt::format("context_parallel_slice: T {} is not a multiple of 2 x {} (rank {})", b.T, size, rank));
  Batch out;
  out.B = b.B;
  out.T = b.T / size;
  out.tokens = cp_rows(b.tokens, b.B, b.T, size, rank);
  out.targets = cp_rows(b.targets, b.B, b.T, size, rank);
  out.positions = cp_rows(b.positions, b.B, b.T, size, rank);
  out.doc_ids = cp_rows(b.doc_ids, b.B, b.T, size, rank);
  out.loss_weights = cp_rows(b.loss_weights, b.B, b.T, size, rank);
  return out;
}

int64_t Batch::num_loss_tokens() const {
  return std::count_if(loss_weights.begin(), loss_weights.end(), [](float w) { return w != 0.0f; });
}

Batch make_batch(const std::vector<Sample>& samples, std::span<const int64_t> indices, int64_t seq_len,
                 int32_t pad_id) {
  int64_t longest = 0;
  for (int64_t index : indices) {
    const Sample& sample = samples.at(index);
    const auto length = static_cast<int64_t>(sample.tokens.size());
    // A packed row's inputs are all its tokens (each sample's last one predicts nothing).
    const int64_t inputs = sample.doc_lengths.empty() ? length - 1 : length;
    if (length < 2)
      throw DataError("sample " + std::to_string(index) + " has " + std::to_string(length) +
                      " tokens; a training sample needs at least 2");
    if (seq_len > 0 && inputs > seq_len) {
      const bool packed = !sample.doc_lengths.empty();
      throw DataError((packed ? "packed row " : "sample ") + std::to_string(index) + " has " + std::to_string(length) +
                          " tokens, more than seq_len" + (packed ? "" : " + 1") + " = " +
                          std::to_string(packed ? seq_len : seq_len + 1),
                      "set max_length <= seq_len + 1 so long samples are truncated or dropped when loading");
    }
    longest = std::max(longest, inputs);
  }
  Batch batch;
  batch.B = static_cast<int64_t>(indices.size());
  batch.T = seq_len > 0 ? seq_len : longest;
  const auto size = static_cast<size_t>(batch.B * batch.T);
  batch.tokens.assign(size, pad_id);
  batch.targets.assign(size, pad_id);
  batch.positions.resize(size);
  batch.doc_ids.assign(size, 0);
  batch.loss_weights.assign(size, 0.0f);
  for (int64_t b = 0; b < batch.B; ++b) {
    const Sample& s = samples[indices[b]];
    const auto row = static_cast<size_t>(b * batch.T);
    if (!s.doc_lengths.empty()) {
      fill_packed_row(s, batch, b);
      continue;
    }
    const size_t inputs = s.tokens.size() - 1;
    std::copy(s.tokens.begin(), s.tokens.end() - 1, batch.tokens.begin() + row);
    std::copy(s.tokens.begin() + 1, s.tokens.end(), batch.targets.begin() + row);
    for (size_t t = 0; t < inputs; ++t) batch.loss_weights[row + t] = s.loss_mask[t + 1] ? 1.0f : 0.0f;
    std::iota(batch.positions.begin() + row, batch.positions.begin() + row + batch.T, 0);
  }
  return batch;
}

DataLoader::DataLoader(std::vector<Sample> samples, DataLoaderOptions options)
    : samples_(std::move(samples)), options_(options) {
  if (samples_.empty()) throw DataError("the data loader got an empty dataset");
  order_ = epoch_order(0);
}

std::vector<int64_t> DataLoader::epoch_order(int64_t epoch) const {
  if (!options_.shuffle) {
    std::vector<int64_t> order(samples_.size());
    std::iota(order.begin(), order.end(), int64_t{0});
    return order;
  }
  return seeded_permutation(size(), options_.seed, PermutationUse::kEpochOrder, static_cast<uint64_t>(epoch));
}

std::vector<int64_t> DataLoader::next_global_batch(int64_t global_batch_size) {
  std::vector<int64_t> indices;
  indices.reserve(static_cast<size_t>(std::max<int64_t>(global_batch_size, 0)));
  for (int64_t i = 0; i < global_batch_size; ++i) {
    if (cursor_ == size()) {
      ++epoch_;
      cursor_ = 0;
      order_ = epoch_order(epoch_);
    }
    indices.push_back(order_[cursor_++]);
  }
  consumed_ += global_batch_size;
  return indices;
}

Batch DataLoader::next_microbatch(int64_t micro_batch_size, int64_t seq_len) {
  const std::vector<int64_t> indices = next_global_batch(micro_batch_size);
  return make_batch(indices, seq_len);
}

Batch DataLoader::make_batch(std::span<const int64_t> indices, int64_t seq_len) const {
  return data::make_batch(samples_, indices, seq_len, options_.pad_id);
}

DataLoader::State DataLoader::state() const { return {epoch_, cursor_, options_.seed, consumed_, size()}; }

void DataLoader::set_state(const State& state) {
  if (state.num_samples != size()) {
    throw DataError("data loader state is for a dataset of " + std::to_string(state.num_samples) +
                        " samples, but this one has " + std::to_string(size()),
                    "resume with the same dataset, max_length and seed as the checkpoint");
  }
  if (state.epoch < 0 || state.cursor < 0 || state.cursor > size() || state.consumed_samples < 0) {
    throw DataError("data loader state is invalid: epoch " + std::to_string(state.epoch) + ", cursor " +
                    std::to_string(state.cursor) + " of " + std::to_string(size()));
  }
  options_.seed = state.seed;
  epoch_ = state.epoch;
  cursor_ = state.cursor;
  consumed_ = state.consumed_samples;
  order_ = epoch_order(epoch_);
}

std::span<const int64_t> dp_rank_slice(std::span<const int64_t> global, int64_t dp_rank, int64_t dp_size) {
  const auto n = static_cast<int64_t>(global.size());
  if (dp_size <= 0 || dp_rank < 0 || dp_rank >= dp_size || n % dp_size != 0) {
    throw Error(ExitCode::kInternal, "dp_rank_slice: a batch of " + std::to_string(n) + " cannot be split for rank " +
                                         std::to_string(dp_rank) + " of " + std::to_string(dp_size));
  }
  const int64_t per_rank = n / dp_size;
  return global.subspan(static_cast<size_t>(dp_rank * per_rank), static_cast<size_t>(per_rank));
}

TrainValSplit split_train_val(std::vector<Sample> samples, double val_ratio, uint64_t seed) {
  const auto n = static_cast<int64_t>(samples.size());
  if (!(val_ratio >= 0.0 && val_ratio < 1.0)) {
    throw DataError("split_dataset_ratio must be in [0, 1), got " + std::to_string(val_ratio));
  }
  int64_t num_val = static_cast<int64_t>(std::llround(val_ratio * static_cast<double>(n)));
  if (val_ratio > 0.0) num_val = std::max<int64_t>(num_val, 1);
  if (num_val >= n && n > 0) {
    throw DataError("split_dataset_ratio " + std::to_string(val_ratio) + " leaves no training sample out of " +
                    std::to_string(n));
  }
  std::vector<uint8_t> is_val(samples.size(), 0);
  const std::vector<int64_t> order = seeded_permutation(n, seed, PermutationUse::kTrainValSplit, 0);
  for (int64_t i = 0; i < num_val; ++i) is_val[order[i]] = 1;
  TrainValSplit split;
  for (int64_t i = 0; i < n; ++i) (is_val[i] ? split.val : split.train).push_back(std::move(samples[i]));
  return split;
}

}  // namespace mtrain::data
