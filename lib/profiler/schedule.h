// The profiler's step schedule, with the semantics of PyTorch's
// torch.profiler.schedule(wait, warmup, active, repeat, skip_first) (and
// torch_npu.profiler.schedule): after `skip_first` steps, cycles of `wait`
// idle steps, `warmup` steps that trace but discard, and `active` recorded
// steps, the last of which also saves; `repeat` cycles (0 = forever).
// Steps are counted from 0: the first step the profiler sees.
//
// mtrain maps its flags as MindSpeed does: skip_first = --profile_step_start,
// wait = warmup = 0, active = end - start, repeat = 1, stepped once per
// training iteration this process runs.
#pragma once

#include <cstdint>

namespace mtrain::profiler {

enum class ScheduleAction { kNone, kWarmup, kRecord, kRecordAndSave };
const char* schedule_action_name(ScheduleAction a);  // "NONE", "WARMUP", "RECORD", "RECORD_AND_SAVE"

struct Schedule {
  int64_t wait = 0;
  int64_t warmup = 0;
  int64_t active = 1;  // > 0
  int64_t repeat = 0;  // 0: forever
  int64_t skip_first = 0;

  // Throws std::invalid_argument unless wait, warmup, repeat, skip_first >= 0 and active > 0.
  void check() const;
  ScheduleAction action(int64_t step) const;

  // MindSpeed's schedule for --profile_step_start / --profile_step_end.
  static Schedule from_step_window(int64_t start, int64_t end) { return Schedule{0, 0, end - start, 1, start}; }
};

}  // namespace mtrain::profiler
