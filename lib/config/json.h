// args.json: every resolved setting (one key per flag table entry, canonical
// names, table order) plus the command and the derived world/batch layout.
// The trainer writes it to <output_dir>/args.json so a run can be reproduced.
#pragma once

#include <string>

#include "config/args.h"

namespace mtrain::config {

// Pretty-printed JSON object (2-space indent, trailing newline).
std::string args_to_json(const Args& args);

// Inverse of args_to_json: keys are flag names (aliases accepted); keys that
// are missing keep their defaults. Throws ConfigError on unknown keys or bad
// values. The result is not validated (call validate()).
Args args_from_json(const std::string& json_text);

}  // namespace mtrain::config
