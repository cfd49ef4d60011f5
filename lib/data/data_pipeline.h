// DataPipeline: turns the data flags into what the trainer consumes. sft:
// JSONL conversations -> chat template -> tokenized samples with answer-only
// loss; pt: documents -> token stream -> fixed windows. Then the train /
// validation split, --num_train_epochs -> --train_iters (swift's rule), and
// a BatchSource that cuts global batches into micro-batches.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/progress.h"
#include "config/args.h"
#include "data/batch_source.h"
#include "data/chat_template.h"
#include "data/loader.h"
#include "data/tokenizer.h"

namespace mtrain::data {

class BlendedGptDataset;

// Which share of the data this rank reads: DP rank dp_rank of dp_size, rows
// padded to a multiple of pad_multiple tokens (sequence parallelism: TP).
struct DataShard {
  int dp_rank = 0;
  int dp_size = 1;
  int64_t pad_multiple = 1;
};

struct PromptSample {
  std::string question;
  std::string reference;
  std::vector<int32_t> prompt_tokens;
};

class DataPipeline {
 public:
  int64_t vocab_size() const { return vocab_size_; }
  // The first n single-round conversations of the training data, as prompts.
  std::vector<PromptSample> sample_prompts(int64_t n) const;
  std::vector<int32_t> stop_ids() const;
  std::string decode_answer(const std::vector<int32_t>& tokens) const;

  std::unique_ptr<BatchSource> train_source(const config::Args& args, const DataShard& shard = {});
  // This DP rank's micro-batches of --eval_iters global batches of the
  // validation set (-1: all of it); micro-batch i goes to DP rank i % dp.
  std::vector<data::Batch> validation_batches(const config::Args& args, const DataShard& shard = {}) const;

 private:
  friend DataPipeline build_data_pipeline(config::Args& args, bool verbose, ProgressSink* progress);
  friend DataPipeline lengths_pipeline(config::Args& args, const std::vector<int64_t>& lengths);
  explicit DataPipeline(data::Tokenizer t)
      : tokenizer_(std::move(t)), vocab_size_(tokenizer_->vocab_size()), pad_id_(tokenizer_->special().pad) {}
  // Megatron's NullTokenizer (pt --data_path only): ids as they are.
  DataPipeline(int64_t vocab_size, int32_t pad_id) : vocab_size_(vocab_size), pad_id_(pad_id) {}
  std::optional<data::Tokenizer> tokenizer_;  // none under NullTokenizer
  int64_t vocab_size_ = 0;
  int32_t pad_id_ = -1;  // what micro-batches are padded with (carries no loss)
  std::vector<data::Sample> train_, val_;
  std::vector<data::Conversation> conversations_;                   // sft only, for sample prompts
  std::shared_ptr<const data::BlendedGptDataset> indexed_train_;    // pt --data_path (indexed_source.h)
  data::ChatTemplate chat_template_ = data::ChatTemplate::kChatml;  // sft: --template or tokenizer_config's
};

// Loads tokenizer and data and prints what the run will use (verbose: rank 0). Fills
// args.train_iters from --num_train_epochs when only that is given.
// `progress` (may be null): sft tokenization's progress line.
DataPipeline build_data_pipeline(config::Args& args, bool verbose = true, ProgressSink* progress = nullptr);

// Training samples of these lengths and no content (a dry run's
// --dry_run_lengths), batched as the job's flags batch real samples
// (packing, padding-free, padded to the longest row): every token carries
// loss, ids are 0. Fills args.train_iters from --num_train_epochs like
// build_data_pipeline. Needs --vocab_size.
DataPipeline lengths_pipeline(config::Args& args, const std::vector<int64_t>& lengths);

}  // namespace mtrain::data
