// Merging the sources of settings: defaults < --model's config.json < model
// preset < YAML config (its includes first) < command line, plus the YAML ENV block.
#include "config/merge.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "common/errors.h"
#include "config/profiles.h"
#include "config/yaml_config.h"

namespace mtrain::config::detail {

namespace {

bool is_config_path(const std::string& s) {
  for (std::string_view ext : {".yaml", ".yml", ".json"}) {
    if (s.size() > ext.size() && s.compare(s.size() - ext.size(), ext.size(), ext) == 0) return true;
  }
  return false;
}

std::string config_path(const MergeInput& in) {
  const char* hint = "the only positional argument is a YAML config file (*.yaml, *.yml); flags start with --";
  if (in.positionals.size() > 1) throw UsageError(fmt::format("unexpected argument '{}'", in.positionals[1]), hint);
  const std::string pos = in.positionals.empty() ? "" : in.positionals.front();
  if (!pos.empty() && !is_config_path(pos)) throw UsageError(fmt::format("unexpected argument '{}'", pos), hint);
  if (!pos.empty() && !in.config_option.empty()) {
    throw UsageError(fmt::format("two config files given ('{}' and --config '{}')", pos, in.config_option),
                     "give the YAML config either as the first argument or with --config");
  }
  return pos.empty() ? in.config_option : pos;
}

const std::string& first_item(const RawValue& v) {
  static const std::string empty;
  return v.items.empty() ? empty : v.items.front();
}

std::string usage_hint(const std::string& name, const FlagSpec& spec) {
  const std::string type = flag_is_bool(spec) ? "[true|false]" : flag_type_text(spec);
  return fmt::format("usage: --{} {}  ({})", normalize_flag_name(name), type, spec.help);
}

void apply_file(const ConfigFile& file, Args& args) {
  for (const auto& a : file.assignments) {
    if (auto e = apply_flag(*a.flag.spec, a.flag.negated, a.value, args); !e.empty()) {
      throw ConfigError(fmt::format("{}: invalid value for '{}': {}", a.pos.str(), a.key, e),
                        usage_hint(a.key, *a.flag.spec));
    }
  }
}

void apply_cli(const std::vector<CliEvent>& events, Args& args) {
  for (const auto& ev : events) {
    if (auto e = apply_flag(*ev.flag.spec, ev.flag.negated, ev.value, args); !e.empty()) {
      throw UsageError(fmt::format("invalid value for --{}: {}", ev.name, e), usage_hint(ev.name, *ev.flag.spec));
    }
  }
}

// The preset named last on the command line, else last in the YAML config.
ConfigFile read_preset(const MergeInput& in, const ConfigFile& config, const std::string& dir) {
  std::string name;
  std::string where;
  for (const auto& a : config.assignments) {
    if (a.flag.spec->name == "model_preset") name = first_item(a.value), where = a.pos.str() + ": ";
  }
  bool from_cli = false;
  for (const auto& ev : in.events) {
    if (ev.flag.spec->name == "model_preset") name = first_item(ev.value), from_cli = true;
  }
  if (name.empty()) return {};
  std::string path;
  try {
    path = resolve_preset_path(name, dir);
  } catch (const ConfigError& e) {
    if (from_cli) throw UsageError(fmt::format("invalid value for --model_preset: {}", e.what()), e.hint());
    throw ConfigError(where + e.what(), e.hint());
  }
  return read_config_file(path, dir);
}

void apply_env(const std::vector<std::pair<std::string, std::string>>& env, std::vector<std::string>& warnings) {
  std::vector<std::pair<std::string, std::string>> merged;  // later files override earlier ones
  for (const auto& [k, v] : env) {
    auto it = std::find_if(merged.begin(), merged.end(), [&](const auto& e) { return e.first == k; });
    if (it != merged.end()) {
      it->second = v;
    } else {
      merged.emplace_back(k, v);
    }
  }
  for (const auto& [k, v] : merged) {
    if (const char* existing = std::getenv(k.c_str()); existing != nullptr) {
      warnings.push_back(fmt::format("{} is already set in environment, using {}", k, existing));
    } else if (::setenv(k.c_str(), v.c_str(), 0) != 0) {
      throw ConfigError(fmt::format("cannot set environment variable '{}' from the ENV block", k));
    }
  }
}

}  // namespace

Args merge_sources(const MergeInput& in, std::vector<std::string>& warnings) {
  const std::string dir = in.config_dir.empty() ? find_config_dir() : in.config_dir;
  const std::string path = config_path(in);
  ConfigFile config;
  if (!path.empty()) config = read_config_file(path, dir);
  const ConfigFile preset = read_preset(in, config, dir);

  const auto apply_sources = [&](Args& a) {
    apply_file(preset, a);
    apply_file(config, a);
    apply_cli(in.events, a);
  };
  Args args;
  apply_sources(args);
  if (args.model) args = with_hf_model(*args.model, apply_sources, warnings);  // below every source
  args.command = in.command;
  args.config_file = path;

  if (!in.apply_env) return args;
  auto env = preset.env;
  env.insert(env.end(), config.env.begin(), config.env.end());
  apply_env(env, warnings);
  return args;
}

void check_device_profile(const Args& args, const std::string& config_dir) {
  try {
    load_device_profile(args.device_profile, config_dir);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("--device_profile {}: {}", args.device_profile, e.what()), e.hint());
  }
}

}  // namespace mtrain::config::detail
