// Megatron-LM's arguments block, the one `megatron/training/arguments.py`
// prints at start on rank 0:
//   ------------------------ arguments ------------------------
//     accumulate_allreduce_grads_in_fp32 .............. False
//     ...  (one "  <dest> <dots to column 50> <str(value)>" line per argument, sorted)
//   -------------------- end of arguments ---------------------
// read into mtrain's flags. mtrain's flag table already uses Megatron's
// names (config/flags.h, aliases included), so a known argument becomes
// `--<name> <value>`. What is not a flag of mtrain's is, in this order:
// - a bookkeeping argument of the table in megatron_args.cc (paths, logging,
//   checkpointing, the data pipeline, process bookkeeping, values derived
//   from other arguments): ignored, as it does not change the step;
// - not in use (None, False, 0, an empty list or string): ignored;
// - at Megatron's default (megatron_defaults.cc, core_v0.15.0): ignored, as
//   the step is Megatron's default behaviour there;
// - anything else: an error naming the log's file:line (mtrain cannot price
//   a step that setting changes).
// A few arguments are translated: world_size (the run's world),
// padded_vocab_size (the vocabulary when vocab_size is None),
// recompute_granularity None (no recompute: mtrain's default is swift's
// selective), attention_backend AttnBackend.<x>, cp_comm_type (p2p / a2a at
// context_parallel_size > 1: the ring or Ulysses).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mtrain::calibrate {

// One "  name ..... value" line of the block.
struct MegatronArgument {
  std::string name, value;  // value: Python's str() of it ("True", "None", "[0]", "AttnBackend.flash")
  int line = 0;             // 1-based line in the log
};

// The first arguments block of `lines` (a log's lines); empty when the log
// has none. Throws DataError (file:line) on a block without its end line or
// a line that is not "  name ... value".
std::vector<MegatronArgument> read_arguments_block(const std::vector<std::string>& lines, const std::string& file);

struct MappedArguments {
  std::vector<std::string> flags;  // mtrain's: "--name", value tokens...
  std::vector<int> flag_lines;     // the log line each flag came from (per "--name" token)
  int world_size = 0;              // 0: the block has no world_size
  int ignored = 0;                 // arguments ignored by the rules above
};

// The block as mtrain's flags. Throws ConfigError (file:line and a hint) on
// an argument that is set, unknown to mtrain, and not bookkeeping.
MappedArguments map_megatron_arguments(const std::vector<MegatronArgument>& args, const std::string& file);

// Why Megatron's argument `name` is ignored as bookkeeping, or "" when it is not in the table.
std::string_view bookkeeping_reason(std::string_view name);
// Megatron's default of an argument mtrain has no flag for (str() form), or "" when not in the table.
std::string_view megatron_default(std::string_view name);

}  // namespace mtrain::calibrate
