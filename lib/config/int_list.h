// Integer-list flag values (--precision_dump_steps, --precision_dump_ranks,
// --profile_ranks): numbers, "a,b" lists and inclusive ranges "a-b", in any
// mix ("1 3-5" = 1,3,4,5; "-1" is a number), sorted and without repeats.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mtrain::config {

// Throws ConfigError naming `flag` for a bad item.
std::vector<int64_t> parse_int_list(const std::vector<std::string>& items, const char* flag);

}  // namespace mtrain::config
