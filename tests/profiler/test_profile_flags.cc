// Validation of the profiling flags: exact messages, and no --profile_* flag
// is accepted without --profile.
#include <gtest/gtest.h>

#include <string>

#include "common/errors.h"
#include "config/flags.h"
#include "config/profile_args.h"

namespace mtrain::config {
namespace {

std::string error_of(const Args& a, int world = 4) {
  try {
    check_profile(a, world);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

Args profiling() {
  Args a;
  a.profile = true;
  return a;
}

TEST(ProfileFlags, DefaultsAreValid) {
  EXPECT_EQ(error_of(Args{}), "");
  EXPECT_EQ(error_of(profiling()), "");
  EXPECT_EQ(profile_ranks(Args{}.profile_ranks), std::vector<int>{-1});
}

TEST(ProfileFlags, StepStartMustBePositiveWithMindSpeedsMessage) {
  Args a = profiling();
  a.profile_step_start = 0;
  EXPECT_EQ(error_of(a), "profile_step_start should be greater than 0 but now it is 0");
  a.profile_step_start = -3;
  EXPECT_EQ(error_of(a), "profile_step_start should be greater than 0 but now it is -3");
}

TEST(ProfileFlags, EndMustFollowStart) {
  Args a = profiling();
  a.profile_step_start = 5;
  a.profile_step_end = 5;
  EXPECT_EQ(error_of(a), "--profile_step_end (5) must be greater than --profile_step_start (5)");
}

TEST(ProfileFlags, RanksMustExist) {
  Args a = profiling();
  a.profile_ranks = {"0", "4"};
  EXPECT_EQ(error_of(a), "--profile_ranks 4: no such rank in a world of 4 ranks");
  a.profile_ranks = {"-2"};
  EXPECT_EQ(error_of(a), "--profile_ranks -2: no such rank in a world of 4 ranks");
  a.profile_ranks = {"0,3"};
  EXPECT_EQ(error_of(a), "");
  EXPECT_EQ(profile_ranks(a.profile_ranks), (std::vector<int>{0, 3}));
  a.profile_ranks = {"x"};
  EXPECT_EQ(error_of(a), "--profile_ranks: 'x' is not a number or a range a-b");
}

TEST(ProfileFlags, UnknownLevel) {
  Args a = profiling();
  a.profile_level = "level3";
  EXPECT_EQ(error_of(a), "--profile_level level3: unknown level");
}

TEST(ProfileFlags, OptionsWithoutProfileAreRefused) {
  Args a;
  a.profile_with_memory = true;
  EXPECT_EQ(error_of(a), "--profile_with_memory needs --profile");
  Args b;
  b.profile_step_end = 20;
  EXPECT_EQ(error_of(b), "--profile_step_end needs --profile");
}

TEST(ProfileFlags, MegatronAndMindSpeedSpellingsResolve) {
  for (const char* n : {"profile", "profile_step_start", "profile_step_end", "profile_ranks", "profile_level",
                        "profile_with_cpu", "profile_with_stack", "profile_with_memory", "profile_record_shapes",
                        "profile_save_path", "use_pytorch_profiler"})
    EXPECT_TRUE(find_flag(n).has_value()) << n;
}

}  // namespace
}  // namespace mtrain::config
