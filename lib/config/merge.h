// Internal to lib/config: merging preset < YAML config < command line into Args.
#pragma once

#include <functional>
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
  bool apply_env = true;   // false: the launcher's look before it decides (peek_args), no setenv
};

// Reads the YAML config and preset, applies ENV, and returns unvalidated Args.
// Throws UsageError for command-line problems, ConfigError for file problems.
Args merge_sources(const MergeInput& in, std::vector<std::string>& warnings);

// `--model <dir>`: Args with the model flags <dir>/config.json implies
// (config/hf_model_config.h) as defaults, then `apply_sources` (preset, YAML,
// command line) on top. An explicit value that contradicts the model's shape
// is a ConfigError naming both values; one that overrides a non-shape field
// (max_position_embeddings, norm_epsilon, rotary_base) adds a warning.
// --tokenizer defaults to <dir>/tokenizer.json when it exists.
Args with_hf_model(const std::string& dir, const std::function<void(Args&)>& apply_sources,
                   std::vector<std::string>& warnings);

// ConfigError unless args.device_profile names a loadable profile.
void check_device_profile(const Args& args, const std::string& config_dir);

}  // namespace mtrain::config::detail
