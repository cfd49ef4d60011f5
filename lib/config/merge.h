// Internal to lib/config: merging preset < YAML config < command line into Args.
#pragma once

#include <string>
#include <vector>

#include "config/args.h"
#include "config/flags.h"

namespace mtrain::config::detail {

// One occurrence of a flag on the command line, in argv order.
struct CliEvent {
  std::string name;  // as matched (normalized), e.g. "no_rope_fusion"
  FlagMatch flag;
  RawValue value;
};

struct MergeInput {
  std::string command;
  std::vector<std::string> positionals;  // at most one: the YAML config
  std::string config_option;             // --config FILE
  std::vector<CliEvent> events;
  std::string config_dir;  // "" = find_config_dir()
};

// Reads the YAML config and preset, applies ENV, and returns unvalidated Args.
// Throws UsageError for command-line problems, ConfigError for file problems.
Args merge_sources(const MergeInput& in, std::vector<std::string>& warnings);

// ConfigError unless args.device_profile names a loadable profile.
void check_device_profile(const Args& args, const std::string& config_dir);

}  // namespace mtrain::config::detail
