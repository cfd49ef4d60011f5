// Validation of the profiling flags (profile_args.h). Messages: MindSpeed-LLM's
// for the step start; ours name the flag, the value and the limit.
#include <fmt/format.h>

#include "common/errors.h"
#include "config/int_list.h"
#include "config/profile_args.h"

namespace mtrain::config {

std::vector<int> profile_ranks(const std::vector<std::string>& items) {
  const std::vector<int64_t> v = parse_int_list(items, "profile_ranks");
  return std::vector<int>(v.begin(), v.end());
}

const char* profiler_choice_set(const Args& a) {
  const Args d;
  return a.profile_step_start != d.profile_step_start ? "profile_step_start"
         : a.profile_step_end != d.profile_step_end   ? "profile_step_end"
         : a.profile_ranks != d.profile_ranks         ? "profile_ranks"
         : a.profile_level != d.profile_level         ? "profile_level"
         : a.profile_with_cpu                         ? "profile_with_cpu"
         : a.profile_with_stack                       ? "profile_with_stack"
         : a.profile_with_memory                      ? "profile_with_memory"
         : a.profile_record_shapes                    ? "profile_record_shapes"
                                                      : nullptr;
}

void check_profile(const Args& a, int world_size) {
  const char* other = profiler_choice_set(a);
  if (!other && a.profile_save_path != Args{}.profile_save_path) other = "profile_save_path";
  if (!a.profile) {
    if (other)
      throw ConfigError(fmt::format("--{} needs --profile", other),
                        "add --profile to profile iterations --profile_step_start+1 .. --profile_step_end");
    return;
  }
  if (a.profile_step_start <= 0)
    throw ConfigError(fmt::format("profile_step_start should be greater than 0 but now it is {}", a.profile_step_start),
                      "the first profiled iteration is --profile_step_start + 1");
  if (a.profile_step_end <= a.profile_step_start)
    throw ConfigError(fmt::format("--profile_step_end ({}) must be greater than --profile_step_start ({})",
                                  a.profile_step_end, a.profile_step_start),
                      "iterations start+1 .. end are profiled");
  for (int r : profile_ranks(a.profile_ranks))
    if (r < -1 || r >= world_size)
      throw ConfigError(fmt::format("--profile_ranks {}: no such rank in a world of {} rank{}", r, world_size,
                                    world_size == 1 ? "" : "s"),
                        fmt::format("ranks are 0..{}, or -1 for all", world_size - 1));
  const std::string& level = a.profile_level;
  if (level != "level0" && level != "level1" && level != "level2")
    throw ConfigError(fmt::format("--profile_level {}: unknown level", level), "choose level0, level1 or level2");
  if (a.profile_save_path.empty()) throw ConfigError("--profile_save_path must not be empty");
}

}  // namespace mtrain::config
