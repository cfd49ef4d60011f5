// Validation and derivation of merged Args, before anything is allocated.
//
// Messages use Megatron-LM's own wording where it has one (the hint then
// names the flags and values); otherwise they name the flag (`--lr`) and say
// what is expected. Failures throw ConfigError (exit 3).
#pragma once

#include <string>
#include <vector>

#include "config/args.h"

namespace mtrain::config {

// Checks every rule and fills derived values (ffn_hidden_size, kv_channels,
// group_query_attention/num_query_groups, seq_length, max_length,
// max_position_embeddings, lr, loss_scale, lr_decay_iters when train_iters is
// set, virtual_pipeline_model_parallel_size, attention_backend normalized to
// flash|unfused, world_size, data_parallel_size, num_micro_batches).
// Idempotent. Returns warnings for the caller to print (e.g. Megatron's
// "Disabling sequence parallelism because tensor model parallelism is disabled").
std::vector<std::string> validate(Args& args, int world_size);

// Throws ConfigError if a setting that mtrain does not implement yet has a
// non-default value (the list and the reasons live in unsupported.cc).
void check_supported(const Args& args);

// After the trainer derives train_iters from num_train_epochs and the dataset
// size: sets train_iters, derives lr_decay_iters and re-checks the schedule.
void set_train_iters(Args& args, int train_iters);

// Megatron's vocabulary padding: multiple = divisible_by * tp;
// padded = ceil(vocab / multiple) * multiple.
int padded_vocab_size(int vocab_size, int make_vocab_size_divisible_by, int tensor_model_parallel_size);

}  // namespace mtrain::config
