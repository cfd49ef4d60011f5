// Indexed pretraining data for the trainer (indexed_source.h).
#include "data/indexed_source.h"

#include <fmt/format.h>

#include "common/errors.h"

namespace mtrain::data {

namespace {

data::Sample to_sample(std::vector<int32_t> tokens, int64_t vocab) {
  for (int32_t t : tokens)
    if (t >= vocab)
      throw DataError(fmt::format("--data_path: token id {} is outside the vocabulary of {}", t, vocab),
                      "preprocess the data with the tokenizer given to --tokenizer (NullTokenizer: raise --vocab_size "
                      "above the largest id)");
  data::Sample s;
  s.loss_mask.assign(tokens.size(), 1);
  s.tokens = std::move(tokens);
  return s;
}

// Samples [first, first + count) of the blend as one micro-batch, rows padded
// to a multiple of pad_multiple tokens (sequence parallelism).
data::Batch indexed_batch(const data::BlendedGptDataset& ds, int64_t first, int64_t count, int32_t pad, int64_t vocab,
                          int64_t pad_multiple) {
  std::vector<data::Sample> rows;
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < count; ++i) {
    rows.push_back(to_sample(ds.sample(first + i), vocab));
    idx.push_back(i);
  }
  const int64_t T = static_cast<int64_t>(rows.front().tokens.size()) - 1;
  return data::make_batch(rows, idx, (T + pad_multiple - 1) / pad_multiple * pad_multiple, pad);
}

class IndexedSource : public BatchSource {
 public:
  IndexedSource(std::shared_ptr<const data::BlendedGptDataset> ds, const config::Args& a, int32_t pad, int64_t vocab,
                const DataShard& shard)
      : ds_(std::move(ds)),
        gbs_(a.global_batch_size),
        mbs_(a.micro_batch_size),
        seed_(static_cast<uint64_t>(a.seed)),
        pad_(pad),
        vocab_(vocab),
        shard_(shard) {}

  std::vector<data::Batch> next_global_batch() override {
    if (consumed_ + gbs_ > ds_->size())
      throw DataError(
          fmt::format("--data_path: global batch at sample {} runs past the {} samples built", consumed_, ds_->size()),
          "the indices are built for --train_iters * --global_batch_size samples");
    std::vector<data::Batch> out;
    for (int64_t s = shard_.dp_rank * mbs_; s < gbs_; s += mbs_ * shard_.dp_size)
      out.push_back(indexed_batch(*ds_, consumed_ + s, mbs_, pad_, vocab_, shard_.pad_multiple));
    consumed_ += gbs_;
    return out;
  }
  int64_t global_batch_samples() const override { return gbs_; }
  data::DataLoader::State position() const override {
    return {.epoch = 0, .cursor = consumed_, .seed = seed_, .consumed_samples = consumed_, .num_samples = ds_->size()};
  }
  void set_position(const data::DataLoader::State& s) override {
    if (s.seed != seed_ || s.consumed_samples < 0 || s.cursor != s.consumed_samples)
      throw DataError(fmt::format("the checkpoint's data position (sample {}, seed {}) is not one of --data_path "
                                  "with --seed {}",
                                  s.consumed_samples, s.seed, seed_),
                      "resume with the --seed and data of the run that saved the checkpoint");
    consumed_ = s.consumed_samples;
  }

 private:
  std::shared_ptr<const data::BlendedGptDataset> ds_;
  int64_t gbs_, mbs_;
  uint64_t seed_;
  int32_t pad_;
  int64_t vocab_;
  DataShard shard_;
  int64_t consumed_ = 0;
};

}  // namespace

IndexedPretrainData load_indexed_pretrain_data(const config::Args& a, int64_t vocab, bool verbose) {
  if (a.command != "pt")
    throw ConfigError(fmt::format("--data_path is pretraining data; `mtrain {}` takes --dataset", a.command),
                      "use `mtrain pt --data_path ...`");
  if (!a.dataset.empty() || !a.val_dataset.empty())
    throw ConfigError("--data_path and --dataset / --val_dataset were both given",
                      "give one: --data_path (indexed .bin/.idx) or --dataset (JSONL / text)");
  if (!a.train_iters)
    throw ConfigError("--data_path needs --train_iters",
                      "the sample indices are built for --train_iters * --global_batch_size samples");
  const data::DataPathBlend blend = data::parse_data_path(a.data_path);
  if (a.seed < 0) throw ConfigError(fmt::format("--seed {}: Megatron's dataset shuffle needs a seed >= 0", a.seed));
  data::IndexedSplitOptions o;
  o.split = data::parse_split(a.split);
  o.gpt = {a.seq_length.value(), static_cast<uint32_t>(a.seed), a.data_cache_path.value_or("")};
  std::vector<std::shared_ptr<const data::IndexedDataset>> sets;
  for (const std::string& prefix : blend.prefixes) sets.push_back(std::make_shared<const data::IndexedDataset>(prefix));
  IndexedPretrainData d;
  const int64_t train_samples = int64_t{a.train_iters.value()} * a.global_batch_size;
  d.train = data::build_indexed_split(blend, sets, o, 0, train_samples);
  std::unique_ptr<data::BlendedGptDataset> valid;
  if (a.eval_interval.value_or(0) > 0) {
    const std::optional<int64_t> n =
        a.eval_iters >= 0 ? std::optional<int64_t>(int64_t{a.eval_iters} * a.global_batch_size) : std::nullopt;
    valid = data::build_indexed_split(blend, sets, o, 1, n);
    for (int64_t i = 0; valid && i < valid->size(); ++i) d.valid.push_back(to_sample(valid->sample(i), vocab));
  }
  if (verbose) {
    int64_t cached = 0, built = 0;
    for (const data::GptDataset& g : d.train->datasets()) (g.loaded_from_cache() ? cached : built) += 1;
    fmt::print(
        " > data: {} indexed dataset(s) ({}), split {}; {} training samples ({} index set(s) read from the "
        "cache, {} built), {} validation samples; {} iterations of {} samples\n",
        sets.size(), blend.weights.empty() ? "unweighted" : "weighted", a.split, d.train->size(), cached, built,
        d.valid.size(), a.train_iters.value(), a.global_batch_size);
  }
  return d;
}

std::unique_ptr<BatchSource> make_indexed_source(std::shared_ptr<const data::BlendedGptDataset> train,
                                                 const config::Args& a, int32_t pad_id, int64_t vocab_size,
                                                 const DataShard& shard) {
  return std::make_unique<IndexedSource>(std::move(train), a, pad_id, vocab_size, shard);
}

}  // namespace mtrain::data
