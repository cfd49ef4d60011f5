// YAML (or JSON) job configs and model presets, read into ordered
// assignments with their source position. Internal to lib/config: the
// yaml-cpp types stay in yaml_config.cc.
//
// A config is a mapping: keys are flag names (either spelling, aliases ok),
// values scalars or sequences; `ENV:` is a mapping of environment variables;
// `include:` (a name or a list) pulls in presets or other YAML files first
// (relative paths are resolved against the including file's directory).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "config/flags.h"

namespace mtrain::config::detail {

struct SourcePos {
  std::string file;
  int line = 0;             // 1-based
  int column = 0;           // 1-based
  std::string str() const;  // "file:line:col"
};

struct Assignment {
  std::string key;  // as written
  FlagMatch flag;
  RawValue value;
  SourcePos pos;
};

struct ConfigFile {
  std::vector<Assignment> assignments;                   // included files first, in order
  std::vector<std::pair<std::string, std::string>> env;  // ENV: entries, including files' first
};

// Reads `path` (and its includes). Throws ConfigError naming file:line:col on
// bad syntax, unknown keys (with did-you-mean) or misplaced structures.
ConfigFile read_config_file(const std::string& path, const std::string& config_dir);

// configs/models/<name>.yaml, or `name` itself if it is a path to a file.
// Throws ConfigError listing the available presets if there is none.
std::string resolve_preset_path(const std::string& name, const std::string& config_dir);

}  // namespace mtrain::config::detail
