// The schedule's action per step against tables derived by hand from
// torch.profiler.schedule's definition.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "profiler/schedule.h"

namespace mtrain::profiler {
namespace {

// One letter per step: N none, W warmup, R record, S record-and-save.
std::string table(const Schedule& s, int steps) {
  std::string out;
  for (int i = 0; i < steps; ++i) {
    switch (s.action(i)) {
      case ScheduleAction::kNone:
        out += 'N';
        break;
      case ScheduleAction::kWarmup:
        out += 'W';
        break;
      case ScheduleAction::kRecord:
        out += 'R';
        break;
      case ScheduleAction::kRecordAndSave:
        out += 'S';
        break;
    }
  }
  return out;
}

TEST(ProfilerSchedule, MindSpeedWindowRecordsIterationsStartPlusOneToEnd) {
  // Defaults 10/12: steps 0..9 (iterations 1..10) none, 10 record, 11 save.
  EXPECT_EQ(table(Schedule::from_step_window(10, 12), 14), "NNNNNNNNNNRSNN");
  EXPECT_EQ(table(Schedule::from_step_window(1, 3), 6), "NRSNNN");
  EXPECT_EQ(table(Schedule::from_step_window(2, 3), 5), "NNSNN");  // one active step saves at once
}

TEST(ProfilerSchedule, WaitWarmupActiveRepeat) {
  // PyTorch docs example: wait=1, warmup=1, active=2, repeat=1.
  EXPECT_EQ(table(Schedule{1, 1, 2, 1, 0}, 8), "NWRSNNNN");
  // repeat=2 runs the cycle twice.
  EXPECT_EQ(table(Schedule{1, 1, 2, 2, 0}, 10), "NWRSNWRSNN");
  // skip_first shifts everything.
  EXPECT_EQ(table(Schedule{1, 1, 2, 1, 3}, 10), "NNNNWRSNNN");
}

TEST(ProfilerSchedule, RepeatZeroCyclesForever) {
  EXPECT_EQ(table(Schedule{0, 1, 1, 0, 0}, 8), "WSWSWSWS");
  EXPECT_EQ(table(Schedule{2, 0, 3, 0, 1}, 12), "NNNRRSNNRRSN");
}

TEST(ProfilerSchedule, ActiveOneSavesEveryStep) { EXPECT_EQ(table(Schedule{0, 0, 1, 3, 0}, 5), "SSSNN"); }

TEST(ProfilerSchedule, RejectsInvalidArguments) {
  EXPECT_THROW((Schedule{0, 0, 0, 1, 0}.check()), std::invalid_argument);
  EXPECT_THROW((Schedule{-1, 0, 1, 1, 0}.check()), std::invalid_argument);
  EXPECT_THROW((Schedule{0, 0, 1, -1, 0}.check()), std::invalid_argument);
  EXPECT_NO_THROW((Schedule{0, 0, 1, 0, 0}.check()));
  EXPECT_STREQ(schedule_action_name(ScheduleAction::kRecordAndSave), "RECORD_AND_SAVE");
}

}  // namespace
}  // namespace mtrain::profiler
