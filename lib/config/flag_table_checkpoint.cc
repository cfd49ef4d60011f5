// Flag table, part 3: checkpointing (Megatron-LM / Megatron-SWIFT names;
// --save is an alias of --output_dir, in the logging part).
#include "config/flag_table_parts.h"

namespace mtrain::config::detail {

namespace {
constexpr auto K = FlagGroup::kCheckpoint;
}  // namespace

std::vector<FlagSpec> checkpoint_flags() {
  return {
      {.name = "load",
       .field = &Args::load,
       .group = K,
       .help = "Checkpoint directory to start from: resumes at its latest iteration (weights, optimizer, LR "
               "schedule, loss scale, data position, RNG) under any TP/PP/DP layout; with --finetune only the "
               "weights. Usually the --output_dir of an earlier run.",
       .aliases = {"mcore_model"}},
      {.name = "save_interval",
       .field = &Args::save_interval,
       .group = K,
       .help = "Save a checkpoint every this many iterations; one is always saved at the end of training.",
       .aliases = {"save_steps", "persistent_save_interval"}},
      {.name = "no_save_optim",
       .field = &Args::no_save_optim,
       .group = K,
       .help = "Do not save the optimizer state and loss scale; loading such a checkpoint needs --no_load_optim "
               "(or --finetune) and restarts the LR schedule."},
      {.name = "no_save_rng",
       .field = &Args::no_save_rng,
       .group = K,
       .help = "Do not save the random state (mtrain's dropout is counter-based: the state is the seed)."},
      {.name = "no_load_optim",
       .field = &Args::no_load_optim,
       .group = K,
       .help = "Start the optimizer, LR schedule (warmup again, as Megatron) and loss scale fresh instead of "
               "loading them; the iteration and data position still resume."},
      {.name = "no_load_rng",
       .field = &Args::no_load_rng,
       .group = K,
       .help = "Use --seed instead of the checkpoint's random state."},
      {.name = "finetune",
       .field = &Args::finetune,
       .group = K,
       .help = "Load only the weights from --load and start at iteration 0 (no optimizer, RNG or data "
               "position). Megatron-SWIFT 4 defaults to true; Megatron-LM and SWIFT 3 to false."},
      {.name = "exit_on_missing_checkpoint",
       .field = &Args::exit_on_missing_checkpoint,
       .group = K,
       .help = "Stop (exit 5) when --load holds no checkpoint instead of starting from random weights."},
      {.name = "override_opt_param_scheduler",
       .field = &Args::override_opt_param_scheduler,
       .group = K,
       .help = "On resume, take the LR and weight-decay schedule (lr, min_lr, warmup, decay iterations and "
               "style, weight decay) from this run's flags instead of refusing a checkpoint whose schedule "
               "differs. The schedule's position (iterations done) still comes from the checkpoint."},
      {.name = "use_checkpoint_opt_param_scheduler",
       .field = &Args::use_checkpoint_opt_param_scheduler,
       .group = K,
       .help = "On resume, keep the checkpoint's LR and weight-decay schedule and ignore this run's schedule "
               "flags (the run continues exactly as the saved one would have)."},
      {.name = "ckpt_step",
       .field = &Args::ckpt_step,
       .group = K,
       .help = "Load this iteration from --load instead of the one latest_checkpointed_iteration.txt names.",
       .default_text = "None (the tracker's)"},
      {.name = "save_total_limit",
       .field = &Args::save_total_limit,
       .group = K,
       .help = "Keep only the newest N checkpoints; older ones are deleted after a new one is committed, "
               "never before.",
       .default_text = "None (keep all)"},
      {.name = "on_save_error",
       .field = &Args::on_save_error,
       .group = K,
       .help = "When a save fails (disk full, I/O error): stop (exit 5) or continue training without that "
               "checkpoint. The previous checkpoint stays intact either way; every rank decides alike.",
       .choices = {"stop", "continue"}},
      {.name = "save_timeout_minutes",
       .field = &Args::save_timeout_minutes,
       .group = K,
       .help = "A save that makes no progress for this long ends the run (exit 5) instead of hanging it (and "
               "the other ranks).",
       .default_text = "None (--distributed_timeout_minutes)"},
      {.name = "checkpoint_dir_mode",
       .field = &Args::checkpoint_dir_mode,
       .group = K,
       .help = "Permissions (octal) of the checkpoint directories; never world-writable."},
      {.name = "checkpoint_file_mode",
       .field = &Args::checkpoint_file_mode,
       .group = K,
       .help = "Permissions (octal) of the checkpoint files; never world-writable."},
  };
}

}  // namespace mtrain::config::detail
