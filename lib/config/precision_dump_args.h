// The precision-dump flags (--precision_dump_*) in checked, parsed form:
// validate() calls check_precision_dump; the dumper (observe/precision_dump.h)
// reads the lists through parse_int_list (config/int_list.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/args.h"

namespace mtrain::config {

// ConfigError for a bad level, a step < 1, a rank outside [0, world_size) or
// a precision flag without --precision_dump_path. Appends the warning about
// fused ops hiding their inside (level L1 / mix with fusions on) to `warnings`.
void check_precision_dump(const Args& a, int world_size, std::vector<std::string>& warnings);

}  // namespace mtrain::config
