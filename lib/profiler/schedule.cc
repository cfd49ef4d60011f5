#include "profiler/schedule.h"

#include <stdexcept>

namespace mtrain::profiler {

const char* schedule_action_name(ScheduleAction a) {
  switch (a) {
    case ScheduleAction::kNone:
      return "NONE";
    case ScheduleAction::kWarmup:
      return "WARMUP";
    case ScheduleAction::kRecord:
      return "RECORD";
    case ScheduleAction::kRecordAndSave:
      return "RECORD_AND_SAVE";
  }
  return "?";
}

void Schedule::check() const {
  if (wait < 0 || warmup < 0 || active <= 0 || repeat < 0 || skip_first < 0)
    throw std::invalid_argument("Invalid profiler schedule arguments");
}

// torch/profiler/profiler.py schedule_fn, step for step (its
// `step / num_steps >= repeat` is a float division: step >= repeat·num_steps).
ScheduleAction Schedule::action(int64_t step) const {
  if (step < 0) return ScheduleAction::kNone;
  if (step < skip_first) return ScheduleAction::kNone;
  step -= skip_first;
  const int64_t num_steps = wait + warmup + active;
  if (repeat > 0 && step >= repeat * num_steps) return ScheduleAction::kNone;
  const int64_t mod_step = step % num_steps;
  if (mod_step < wait) return ScheduleAction::kNone;
  if (mod_step < wait + warmup) return ScheduleAction::kWarmup;
  return mod_step < num_steps - 1 ? ScheduleAction::kRecord : ScheduleAction::kRecordAndSave;
}

}  // namespace mtrain::profiler
