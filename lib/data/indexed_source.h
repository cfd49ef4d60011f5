// `mtrain pt --data_path ...`: Megatron indexed datasets as the trainer's
// data. The train split is read in Megatron's order (sample index =
// consumed samples + position in the global batch; DP rank r takes global
// micro-batches m * dp + r, like LoaderSource), so a checkpoint's position is
// just the consumed sample count and a resumed run under any DP size reads
// exactly the samples a straight run would. The validation split is
// materialised as samples for DataPipeline::validation_batches.
#pragma once

#include <memory>
#include <vector>

#include "config/args.h"
#include "data/batch_source.h"
#include "data/blended_dataset.h"
#include "data/data_pipeline.h"
#include "data/sample.h"

namespace mtrain::data {

struct IndexedPretrainData {
  std::shared_ptr<const data::BlendedGptDataset> train;
  std::vector<data::Sample> valid;
};

// Opens the --data_path datasets and builds (or reads from the cache) the
// train split for --train_iters * --global_batch_size samples and, when
// evaluation is on, the valid split (--eval_iters global batches, -1: one
// epoch). Every token must be < vocab_size (the tokenizer's). Throws ConfigError for bad --data_path / --split or a
// missing
// --train_iters, DataError for bad data.
IndexedPretrainData load_indexed_pretrain_data(const config::Args& args, int64_t vocab_size, bool verbose);

std::unique_ptr<BatchSource> make_indexed_source(std::shared_ptr<const data::BlendedGptDataset> train,
                                                 const config::Args& args, int32_t pad_id, int64_t vocab_size,
                                                 const DataShard& shard);

}  // namespace mtrain::data
