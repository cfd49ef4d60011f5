// The profiling flags (--profile, --profile_step_start/_end, --profile_ranks,
// --profile_level, --profile_with_*, --profile_save_path): validate() calls
// check_profile; the profiler (observe/profiler_hook.h) reads the rank list
// through profile_ranks.
#pragma once

#include <string>
#include <vector>

#include "config/args.h"

namespace mtrain::config {

// The global ranks --profile_ranks names (config/int_list.h: lists and
// ranges); {-1} profiles every rank. ConfigError for a non-number.
std::vector<int> profile_ranks(const std::vector<std::string>& items);

// ConfigError (exit 3) for a bad window, rank or level, or a --profile_* flag
// given without --profile (it would otherwise be silently ignored).
void check_profile(const Args& a, int world_size);
// The first of a real run's profiler choices (steps, ranks, level, with_*,
// record_shapes) set away from its default, as a flag name without dashes
// ("profile_ranks"); nullptr when none is.
const char* profiler_choice_set(const Args& a);

}  // namespace mtrain::config
