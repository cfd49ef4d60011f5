#include "data/data_pipeline.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "common/errors.h"
#include "config/validate.h"
#include "data/indexed_source.h"
#include "data/packing.h"
#include "data/pretrain.h"
#include "data/sft.h"
#include "data/sft_files.h"

namespace mtrain::data {

namespace {

// A micro-batch padded to the longest row, rounded up to a multiple of
// `multiple` tokens per row (sequence parallelism splits B*T over TP ranks).
// Padding carries no loss and, being after every real token, cannot change a
// causal result.
data::Batch padded_batch(const data::DataLoader& loader, std::span<const int64_t> idx, int64_t multiple) {
  data::Batch b = loader.make_batch(idx, 0);
  if (multiple > 1 && b.T % multiple != 0) b = loader.make_batch(idx, (b.T + multiple - 1) / multiple * multiple);
  return b;
}

// This DP rank's micro-batches of each global batch: local micro-batch m is
// the global micro-batch m * dp + dp_rank (Megatron's sampler order).
class LoaderSource : public BatchSource {
 public:
  LoaderSource(std::vector<data::Sample> samples, const config::Args& a, int32_t pad, const DataShard& shard)
      : loader_(std::move(samples),
                data::DataLoaderOptions{static_cast<uint64_t>(a.data_seed), a.dataset_shuffle, pad}),
        gbs_(a.global_batch_size),
        mbs_(a.micro_batch_size),
        shard_(shard) {}

  std::vector<data::Batch> next_global_batch() override {
    const std::vector<int64_t> idx = loader_.next_global_batch(gbs_);
    std::vector<data::Batch> out;
    const int64_t step = mbs_ * shard_.dp_size;
    for (int64_t s = shard_.dp_rank * mbs_; s < gbs_; s += step)
      out.push_back(padded_batch(loader_, std::span<const int64_t>(idx).subspan(s, mbs_), shard_.pad_multiple));
    return out;
  }
  int64_t global_batch_samples() const override { return gbs_; }
  data::DataLoader::State position() const override { return loader_.state(); }
  void set_position(const data::DataLoader::State& s) override { loader_.set_state(s); }

 private:
  data::DataLoader loader_;
  int64_t gbs_, mbs_;
  DataShard shard_;
};

data::SftOptions sft_options(const config::Args& a, const data::Tokenizer& tok) {
  data::SftOptions o;
  if (a.template_name) {
    o.chat_template = data::chat_template_from_name(*a.template_name).value();  // choices checked by the flag
  } else if (!tok.chat_template().empty()) {
    auto t = data::chat_template_from_name(tok.chat_template());
    if (!t)
      throw DataError(fmt::format("{}: unsupported chat template '{}'", tok.source(), tok.chat_template()),
                      "pass --template chatml, qwen, llama3 or default");
    o.chat_template = *t;
  }
  auto ls = data::loss_scale_from_name(a.loss_scale.value_or("default"));
  if (!ls)
    throw ConfigError("--loss_scale " + a.loss_scale.value_or("") + ": unknown strategy",
                      "use default, all or last_round");
  o.loss_scale = *ls;
  o.max_length = a.max_length.value_or(a.seq_length.value());
  o.truncation = data::truncation_strategy_from_name(a.truncation_strategy).value();
  return o;
}

// " (N samples dropped: ...; M cut to --max_length ...)", or "" when nothing was.
std::string dropped_text(int64_t dropped, int64_t truncated, const config::Args& a) {
  std::vector<std::string> parts;
  if (dropped)
    parts.push_back(fmt::format(
        "{} samples dropped: {}", dropped,
        a.truncation_strategy == "delete" ? "longer than --max_length or no loss tokens" : "no loss tokens left"));
  if (truncated)
    parts.push_back(fmt::format("{} samples cut to --max_length {} (--truncation_strategy {})", truncated,
                                a.max_length.value_or(a.seq_length.value()), a.truncation_strategy));
  return parts.empty() ? "" : fmt::format(" ({})", fmt::join(parts, "; "));
}

// " (N malformed records skipped (--strict false), the first: ...)", or "".
std::string malformed_text(const data::SftRecords& malformed, const config::Args& a) {
  if (malformed.num_malformed == 0) return "";
  return fmt::format(" ({} malformed records skipped (--strict false, --max_malformed {}), the first: {})",
                     malformed.num_malformed, a.max_malformed, malformed.first_malformed);
}

// Megatron's NullTokenizer: `--tokenizer_type NullTokenizer`, or implied by
// --vocab_size without --tokenizer on pre-tokenized --data_path. True when it
// is used; a combination that cannot work is refused naming the flags.
bool use_null_tokenizer(const config::Args& a) {
  const bool asked = a.tokenizer_type == "NullTokenizer";
  if (asked && a.tokenizer)
    throw ConfigError(fmt::format("--tokenizer_type NullTokenizer and --tokenizer {} were both given", *a.tokenizer),
                      "drop one: NullTokenizer reads token ids without a tokenizer file");
  if (a.tokenizer) return false;
  if (!asked && !(a.vocab_size && !a.data_path.empty()))
    throw ConfigError("no tokenizer: --tokenizer is not set",
                      "pass --tokenizer <path to tokenizer.json>, e.g. configs/demo/tokenizer.json (for pre-tokenized "
                      "`pt --data_path` data, --vocab_size N instead: Megatron's NullTokenizer)");
  if (a.data_path.empty())
    throw ConfigError("--tokenizer_type NullTokenizer reads pre-tokenized data only, and no --data_path was given",
                      "use `mtrain pt --data_path <prefix>`, or pass --tokenizer for --dataset");
  if (!a.vocab_size)
    throw ConfigError("--tokenizer_type NullTokenizer needs --vocab_size",
                      "pass --vocab_size N: the data's token ids must be below N (N - 1 is the end of document)");
  return true;
}

// What loading the --dataset / --val_dataset files counted, for the summary line.
// Samples longer than --max_length are dropped (delete) or cut (left/right);
// samples left without loss tokens are always dropped.
struct LoadCounts {
  int64_t dropped = 0, truncated = 0, tokens = 0;
  data::SftRecords malformed;  // --strict false: records skipped over all datasets
};

// The samples of `paths`: sft conversations through the chat template (kept in
// `conversations` when it is not null), pt documents cut into windows.
std::vector<data::Sample> load_samples(const std::vector<std::string>& paths, const config::Args& a,
                                       const data::Tokenizer& tok, const data::SftOptions& sft, ProgressSink* progress,
                                       LoadCounts& counts, std::vector<data::Conversation>* conversations) {
  std::vector<data::Sample> out;
  if (a.command != "pt") {
    std::vector<data::Conversation> conv =
        data::read_sft_datasets(paths, {a.strict, a.max_malformed}, static_cast<uint64_t>(a.data_seed),
                                conversations ? 0 : 1000, counts.malformed);
    data::SftDataset d = data::build_sft_dataset(conv, tok, sft, fmt::format("{}", fmt::join(paths, " ")), progress);
    (a.truncation_strategy == "delete" ? counts.dropped : counts.truncated) += d.num_too_long;
    counts.dropped += d.num_no_loss;
    counts.tokens += d.num_tokens;
    if (conversations) *conversations = std::move(conv);
    return std::move(d.samples);
  }
  for (const std::string& path : paths) {
    data::PretrainDataset d = data::load_pretrain_dataset(path, tok, a.seq_length.value(), a.text_key);
    counts.tokens += d.num_tokens;
    std::move(d.samples.begin(), d.samples.end(), std::back_inserter(out));
  }
  return out;
}

// --num_train_epochs -> --train_iters over `samples` training samples (or rows).
void set_train_iters_from_epochs(config::Args& a, int64_t samples) {
  // swift: len(ds) // (mbs*dp) * (mbs*dp) * epochs // gbs.
  const int64_t per = static_cast<int64_t>(a.micro_batch_size) * a.data_parallel_size;
  const int64_t n = samples / per * per * a.num_train_epochs.value() / a.global_batch_size;
  if (n < 1)
    throw ConfigError(fmt::format("--num_train_epochs {} over {} samples gives no full global batch of {}",
                                  a.num_train_epochs.value(), samples, a.global_batch_size),
                      "lower --global_batch_size or raise --num_train_epochs");
  config::set_train_iters(a, static_cast<int>(n));
}

// The " > data: ..." line: `train_samples` before packing, `train_rows` after it.
void print_data_summary(const config::Args& a, const LoadCounts& c, int64_t train_samples, size_t val_size,
                        size_t train_rows) {
  fmt::print(
      " > data: {} training samples, {} validation {}, {} tokens{}{}{}; {} iterations of {} {} "
      "({:.2f} epochs)\n",
      train_samples, val_size, a.packing ? "rows" : "samples", c.tokens, dropped_text(c.dropped, c.truncated, a),
      malformed_text(c.malformed, a),
      a.packing ? fmt::format("; packed into {} rows of <= {} tokens", train_rows, a.max_length.value()) : "",
      a.train_iters.value(), a.global_batch_size, a.packing ? "rows" : "samples",
      static_cast<double>(a.train_iters.value()) * a.global_batch_size / train_rows);
}

}  // namespace

DataPipeline build_data_pipeline(config::Args& a, bool verbose, ProgressSink* progress) {
  if (!a.data_path.empty() || a.tokenizer_type) {  // Megatron indexed data (indexed_source.h)
    // NullTokenizer's eod id is vocab_size - 1 (Megatron since #4057); it also
    // pads, as padded positions carry no loss.
    DataPipeline p = use_null_tokenizer(a) ? DataPipeline(*a.vocab_size, *a.vocab_size - 1)
                                           : DataPipeline(data::Tokenizer::load(*a.tokenizer));
    if (verbose && !p.tokenizer_)
      fmt::print(" > building NullTokenizer tokenizer: vocab size {}, eod id {} (token ids are read as they are)\n",
                 p.vocab_size_, p.vocab_size_ - 1);
    IndexedPretrainData d = load_indexed_pretrain_data(a, p.vocab_size_, verbose);
    p.indexed_train_ = std::move(d.train);
    p.val_ = std::move(d.valid);
    return p;
  }
  use_null_tokenizer(a);  // refuses a missing --tokenizer
  if (a.dataset.empty())
    throw ConfigError("no training data: --dataset is not set", "pass --dataset <file.jsonl> [more files]");
  DataPipeline p(data::Tokenizer::load(*a.tokenizer));
  const data::Tokenizer& tok = *p.tokenizer_;
  LoadCounts counts;
  const data::SftOptions sft = a.command == "pt" ? data::SftOptions{} : sft_options(a, tok);
  p.chat_template_ = sft.chat_template;
  p.train_ = load_samples(a.dataset, a, tok, sft, progress, counts, &p.conversations_);
  if (!a.val_dataset.empty()) {
    p.val_ = load_samples(a.val_dataset, a, tok, sft, progress, counts, nullptr);
  } else if (a.split_dataset_ratio > 0) {
    data::TrainValSplit s =
        data::split_train_val(std::move(p.train_), a.split_dataset_ratio, static_cast<uint64_t>(a.data_seed));
    p.train_ = std::move(s.train);
    p.val_ = std::move(s.val);
  }
  if (p.train_.empty())
    throw DataError("the training set is empty after filtering", "check --dataset and --max_length");
  const int64_t train_samples = static_cast<int64_t>(p.train_.size());
  if (a.packing) {  // swift: packing_length = max_length; validation is packed the same way
    p.train_ = data::pack_samples(p.train_, a.max_length.value());
    if (!p.val_.empty()) p.val_ = data::pack_samples(p.val_, a.max_length.value());
  }
  if (!a.train_iters) set_train_iters_from_epochs(a, static_cast<int64_t>(p.train_.size()));
  if (verbose) print_data_summary(a, counts, train_samples, p.val_.size(), p.train_.size());
  return p;
}

DataPipeline lengths_pipeline(config::Args& a, const std::vector<int64_t>& lengths) {
  DataPipeline p(a.vocab_size.value(), 0);
  for (int64_t n : lengths) {
    data::Sample s;
    s.tokens.assign(static_cast<size_t>(n), 0);
    s.loss_mask.assign(static_cast<size_t>(n), 1);
    p.train_.push_back(std::move(s));
  }
  if (a.packing) p.train_ = data::pack_samples(p.train_, a.max_length.value());
  if (!a.train_iters) set_train_iters_from_epochs(a, static_cast<int64_t>(p.train_.size()));
  return p;
}

std::unique_ptr<BatchSource> DataPipeline::train_source(const config::Args& a, const DataShard& shard) {
  if (indexed_train_) return make_indexed_source(indexed_train_, a, pad_id_, vocab_size(), shard);
  return std::make_unique<LoaderSource>(train_, a, pad_id_, shard);
}

std::vector<data::Batch> DataPipeline::validation_batches(const config::Args& a, const DataShard& shard) const {
  std::vector<data::Batch> out;
  if (val_.empty()) return out;
  data::DataLoader loader(val_, data::DataLoaderOptions{0, false, pad_id_});
  int64_t limit = static_cast<int64_t>(val_.size());
  if (a.eval_iters >= 0) limit = std::min<int64_t>(limit, static_cast<int64_t>(a.eval_iters) * a.global_batch_size);
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < limit; ++i) idx.push_back(i);
  // Micro-batch i goes to DP rank i % dp.
  int64_t i = 0;
  for (int64_t s = 0; s < limit; s += a.micro_batch_size, ++i) {
    if (i % shard.dp_size != shard.dp_rank) continue;
    const int64_t n = std::min<int64_t>(a.micro_batch_size, limit - s);
    out.push_back(padded_batch(loader, std::span<const int64_t>(idx).subspan(s, n), shard.pad_multiple));
  }
  return out;
}

std::vector<PromptSample> DataPipeline::sample_prompts(int64_t n) const {
  std::vector<PromptSample> out;
  for (const data::Conversation& c : conversations_) {
    if (static_cast<int64_t>(out.size()) >= n) break;
    std::string system, user, answer;
    for (const data::Message& m : c.messages) {
      if (m.role == "system") system = m.content;
      if (m.role == "user" && user.empty()) user = m.content;
      if (m.role == "assistant" && answer.empty()) answer = m.content;
    }
    if (user.empty() || answer.empty()) continue;
    if (system.empty()) system = data::default_system_prompt(chat_template_);
    out.push_back({user, answer, data::encode_prompt(*tokenizer_, user, system, {}, chat_template_)});
  }
  return out;
}

std::vector<int32_t> DataPipeline::stop_ids() const {
  std::vector<int32_t> s;
  if (!tokenizer_) return s;
  const data::SpecialTokenIds& sp = tokenizer_->special();
  for (int32_t id : {sp.im_end, sp.eos, sp.eod})
    if (id >= 0) s.push_back(id);
  return s;
}

std::string DataPipeline::decode_answer(const std::vector<int32_t>& tokens) const {
  std::string s = tokenizer_ ? tokenizer_->decode(tokens, /*skip_special_tokens=*/true) : std::string();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace mtrain::data
