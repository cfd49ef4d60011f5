// Flag table, part: TensorBoard event files (Megatron-LM's --tensorboard-*
// and --log-*-to-tensorboard, swift's --report_to and default directory;
// observe/tensorboard_hook.h does the work).
#include "config/flag_table_parts.h"

namespace mtrain::config::detail {

namespace {
constexpr auto L = FlagGroup::kLogging;
}  // namespace

std::vector<FlagSpec> tensorboard_flags() {
  return {
      {.name = "report_to",
       .field = &Args::report_to,
       .group = L,
       .help = "Where scalars go besides the log: tensorboard (event files in --tensorboard_dir, read by "
               "`tensorboard --logdir`), none, or all (= tensorboard, the only integration here). wandb and swanlab "
               "are refused: they need a network.",
       .default_text = "[tensorboard]"},
      {.name = "tensorboard_dir",
       .field = &Args::tensorboard_dir,
       .group = L,
       .help = "Directory of the TensorBoard event files, written by the last rank; a resumed run adds a new "
               "file beside the old ones.",
       .default_text = "<output_dir>/runs"},
      {.name = "tensorboard_log_interval",
       .field = &Args::tensorboard_log_interval,
       .group = L,
       .help = "Write the per-iteration scalars (lm loss, learning-rate, grad-norm, ...) every this many "
               "iterations."},
      {.name = "tensorboard_queue_size",
       .field = &Args::tensorboard_queue_size,
       .group = L,
       .help = "Events kept in memory before they are written to the event file (SummaryWriter's max_queue); the "
               "queue is also written at every --log_interval, at the end and when the run stops on an error."},
      {.name = "log_timers_to_tensorboard",
       .field = &Args::log_timers_to_tensorboard,
       .group = L,
       .help = "Write iteration-time (seconds, averaged over --log_interval) at each log line; with "
               "--log_throughput also throughput and the simulated device's iteration time."},
      {.name = "log_memory_to_tensorboard",
       .field = &Args::log_memory_to_tensorboard,
       .group = L,
       .help = "Write the simulated NPU's memory: mem-reserved-bytes, mem-allocated-bytes, "
               "mem-max-allocated-bytes (Megatron's tags) and npu-memory/<category>-bytes."},
      {.name = "log_validation_ppl_to_tensorboard",
       .field = &Args::log_validation_ppl_to_tensorboard,
       .group = L,
       .help = "Also write the validation perplexity (lm loss validation ppl)."},
      {.name = "log_world_size_to_tensorboard",
       .field = &Args::log_world_size_to_tensorboard,
       .group = L,
       .help = "Write world-size."},
      {.name = "log_loss_scale_to_tensorboard",
       .field = &Args::log_loss_scale_to_tensorboard,
       .group = L,
       .help = "Write loss-scale (Megatron's default; --no_log_loss_scale_to_tensorboard turns it off)."},
      {.name = "log_params_norm",
       .field = &Args::log_params_norm,
       .group = L,
       .help = "Compute the L2 norm of the trainable parameters after each step (each counted once over TP, PP "
               "and DP) and show it as ' params norm:' in the log line, logging.jsonl and params-norm."},
      {.name = "log_num_zeros_in_grad",
       .field = &Args::log_num_zeros_in_grad,
       .group = L,
       .help = "Count the zeros in the gradients (after unscaling, each counted once) and show them as "
               "' num zeros:' in the log line, logging.jsonl and num-zeros."},
  };
}

}  // namespace mtrain::config::detail
