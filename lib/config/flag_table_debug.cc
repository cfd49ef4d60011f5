// Flag table, part 9: precision debugging (msprobe's dump, built in;
// observe/precision_dump.h, docs/PRECISION.md).
#include "config/flag_table_parts.h"

namespace mtrain::config::detail {

namespace {
constexpr auto G = FlagGroup::kDebug;
}  // namespace

std::vector<FlagSpec> debug_flags() {
  return {
      {.name = "precision_dump_path",
       .field = &Args::precision_dump_path,
       .group = G,
       .help = "Dump statistics (max, min, mean, L2 norm, NaN/Inf counts) of every module / op input and output, "
               "forward and backward, to <path>/step<N>/rank<R>/dump.json (msprobe's dump; docs/PRECISION.md). "
               "Compare two dumps with `mtrain compare A B`. Empty: no dump.",
       .default_text = "\"\" (off)"},
      {.name = "precision_dump_level",
       .field = &Args::precision_dump_level,
       .group = G,
       .help = "What to dump: L0 = modules (linear_qkv, mlp, decoder.layers.N, ...), L1 = ops (activation_func, "
               "*_bda, cross_entropy, rotary embedding and the steps of unfused kernels), mix = both. "
               "L1 is msprobe's default."},
      {.name = "precision_dump_steps",
       .field = &Args::precision_dump_steps,
       .group = G,
       .help = "Iterations to dump, as numbered in the training log (1-based; msprobe counts steps from 0, so "
               "its step 0 is iteration 1 here). Empty: every iteration.",
       .default_text = "[] (all)"},
      {.name = "precision_dump_ranks",
       .field = &Args::precision_dump_ranks,
       .group = G,
       .help = "Global ranks to dump. Empty: every rank.",
       .default_text = "[] (all)"},
      {.name = "precision_dump_tensors",
       .field = &Args::precision_dump_tensors,
       .group = G,
       .help = "Also write every dumped tensor as <rank dir>/dump_tensor_data/<record>.<role>.npy (float32; "
               "this rank's shard). Large: select few steps."},
  };
}

}  // namespace mtrain::config::detail
