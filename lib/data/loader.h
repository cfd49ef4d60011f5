// Batching and sample order. A DataLoader owns the tokenized samples, walks
// them in a per-epoch shuffled order (Fisher-Yates with an Rng seeded by
// stream_seed(seed, use, epoch), so an order depends only on seed and epoch) and
// cuts global batches of sample indices; micro-batches are built from those
// indices. Its State is a few integers, which is what a checkpoint saves to
// resume at exactly the same sample.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "data/sample.h"

namespace mtrain::data {

struct Batch {
  int64_t B = 0;                    // rows (samples)
  int64_t T = 0;                    // positions per row
  std::vector<int32_t> tokens;      // (B, T) model input; pad_id after the end of a row
  std::vector<int32_t> targets;     // (B, T) the token after tokens[b, t]; pad_id where padded
  std::vector<int32_t> positions;   // (B, T) 0..T-1 in every row
  std::vector<int32_t> doc_ids;     // (B, T) document of the token within its row (all 0 until packing)
  std::vector<float> loss_weights;  // (B, T) 1 where targets[b, t] is trained, 0 for padding and masked tokens

  int64_t num_loss_tokens() const;  // number of non-zero loss weights
};

// Context parallelism (Megatron's get_batch_on_this_cp_rank): every row is
// cut into 2*size chunks of T / (2*size) positions and CP rank `rank` keeps
// chunks rank and 2*size-1-rank, in that order, of every field (tokens,
// targets, the true positions, document ids, loss weights). Throws
// Error(kInternal) unless T is a multiple of 2*size.
Batch context_parallel_slice(const Batch& b, int size, int rank);

// Row b holds samples[indices[b]] (length L): inputs tokens[0..L-2], targets
// tokens[1..L-1], weights loss_mask[1..L-1], right-padded to T. seq_len <= 0
// picks T = the longest row. Throws DataError if a sample has more than
// seq_len + 1 tokens or fewer than 2.
Batch make_batch(const std::vector<Sample>& samples, std::span<const int64_t> indices, int64_t seq_len, int32_t pad_id);

struct DataLoaderOptions {
  uint64_t seed = 42;   // swift --data_seed
  bool shuffle = true;  // false: every epoch in dataset order
  int32_t pad_id = 0;   // tokenizer.special().pad
};

class DataLoader {
 public:
  struct State {
    int64_t epoch = 0;   // current epoch (0-based)
    int64_t cursor = 0;  // position in the epoch's order
    uint64_t seed = 0;
    int64_t consumed_samples = 0;  // over all epochs
    int64_t num_samples = 0;       // dataset size, checked on restore
  };

  DataLoader(std::vector<Sample> samples, DataLoaderOptions options);

  // The next `global_batch_size` sample indices. When an epoch runs out the
  // batch continues with the start of the next epoch's (new) order.
  std::vector<int64_t> next_global_batch(int64_t global_batch_size);
  // next_global_batch(micro_batch_size) built into a Batch.
  Batch next_microbatch(int64_t micro_batch_size, int64_t seq_len);
  Batch make_batch(std::span<const int64_t> indices, int64_t seq_len) const;

  // Sample order of `epoch` (a permutation of 0..size-1).
  std::vector<int64_t> epoch_order(int64_t epoch) const;

  State state() const;
  // Throws DataError if the state does not fit this dataset.
  void set_state(const State& state);

  int64_t size() const { return static_cast<int64_t>(samples_.size()); }
  int64_t epoch() const { return epoch_; }
  int64_t cursor() const { return cursor_; }
  int64_t consumed_samples() const { return consumed_; }
  const std::vector<Sample>& samples() const { return samples_; }
  const DataLoaderOptions& options() const { return options_; }

 private:
  std::vector<Sample> samples_;
  DataLoaderOptions options_;
  int64_t epoch_ = 0;
  int64_t cursor_ = 0;
  int64_t consumed_ = 0;
  std::vector<int64_t> order_;  // epoch_order(epoch_)
};

// The part of a global batch that data-parallel rank `dp_rank` of `dp_size`
// processes (contiguous, Megatron style). global.size() must divide evenly.
std::span<const int64_t> dp_rank_slice(std::span<const int64_t> global, int64_t dp_rank, int64_t dp_size);

// Deterministic train/validation split (swift --split_dataset_ratio): a seeded
// permutation picks round(ratio * n) samples (at least 1 if ratio > 0) for
// validation; both parts keep the original relative order.
struct TrainValSplit {
  std::vector<Sample> train;
  std::vector<Sample> val;
};
TrainValSplit split_train_val(std::vector<Sample> samples, double val_ratio, uint64_t seed);

}  // namespace mtrain::data
