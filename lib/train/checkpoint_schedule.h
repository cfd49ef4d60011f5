// Megatron's guard on resume for the optimizer-parameter schedule
// (megatron/core/optimizer_param_scheduler.py, load_state_dict): a checkpoint
// records the run's LR and weight-decay schedule, and a resume whose flags
// give another schedule is refused, naming each value that differs, unless
// --override_opt_param_scheduler (take this run's) or
// --use_checkpoint_opt_param_scheduler (take the checkpoint's) says which
// wins. Without it a changed --train_iters would silently bend the LR curve
// at the resumed iteration.
//
// Compared, with Megatron's names and units (steps are samples: iterations x
// global batch size): learning rate, minimum learning rate, warmup
// iterations, total number of iterations (lr_decay_steps), learning rate
// decay style, start/end weight decay, total number of weight decay
// iterations (train_iters x global batch), weight decay incr style (mtrain's
// is constant). mtrain also compares what Megatron does not save but what
// changes the curve all the same: the warmup's initial LR and the WSD decay.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/args.h"
#include "nlohmann/json.hpp"
#include "optim/lr_schedule.h"

namespace mtrain::train {

// What a checkpoint records of the schedule, in the units of the flags.
struct ParamSchedule {
  optim::LrScheduleConfig lr;
  double weight_decay = 0.0;  // constant: start_wd = end_wd
  int64_t train_iters = 0;    // wd_incr_steps = train_iters * global batch size
};

ParamSchedule param_schedule(const config::Args& args);

nlohmann::json param_schedule_to_json(const ParamSchedule& s);

enum class ScheduleChoice { kCheck, kOverride, kUseCheckpoint };
ScheduleChoice schedule_choice(const config::Args& args);

struct ScheduleResolution {
  ParamSchedule schedule;          // the one the resumed run uses
  std::vector<std::string> lines;  // Megatron's " > using checkpoint value ..." lines
};

// The checkpoint's record `saved` (null: an mtrain checkpoint from before
// this record existed) against this run's schedule. Throws CheckpointError
// (every difference, one Megatron message per line, and a hint naming both
// flags) unless `choice` settles it; `where` names the checkpoint.
ScheduleResolution resolve_param_schedule(const nlohmann::json* saved, const ParamSchedule& mine, ScheduleChoice choice,
                                          const std::string& where);

}  // namespace mtrain::train
