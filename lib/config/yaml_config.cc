// Reading YAML job configs and presets with yaml-cpp (the only place it is used).
#include "config/yaml_config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>

#include "common/errors.h"
#include "config/profiles.h"

namespace mtrain::config::detail {

namespace fs = std::filesystem;

std::string SourcePos::str() const { return fmt::format("{}:{}:{}", file, line, column); }

namespace {

constexpr int kMaxIncludeDepth = 8;

SourcePos pos_of(const std::string& file, const YAML::Mark& mark, const SourcePos& fallback = {}) {
  if (mark.is_null() || mark.line < 0) return fallback.file.empty() ? SourcePos{file, 1, 1} : fallback;
  return SourcePos{file, mark.line + 1, mark.column + 1};
}

bool looks_like_path(const std::string& s) {
  auto ends_with = [&](std::string_view suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return s.find('/') != std::string::npos || ends_with(".yaml") || ends_with(".yml") || ends_with(".json");
}

class Reader {
 public:
  explicit Reader(std::string config_dir) : config_dir_(std::move(config_dir)) {}

  void read(const std::string& path, ConfigFile& out) {
    if (static_cast<int>(stack_.size()) >= kMaxIncludeDepth) {
      throw ConfigError(fmt::format("{}: includes nested more than {} levels deep", path, kMaxIncludeDepth));
    }
    std::error_code ec;
    std::string canonical = fs::weakly_canonical(path, ec).string();
    if (std::find(stack_.begin(), stack_.end(), canonical) != stack_.end()) {
      throw ConfigError(fmt::format("{}: include cycle ({} includes itself)", path, path));
    }
    if (!fs::is_regular_file(path)) {
      throw ConfigError(fmt::format("config file not found: {}", path),
                        "check the path (relative to the working "
                        "directory or to the including file)");
    }
    YAML::Node root;
    try {
      root = YAML::LoadFile(path);
    } catch (const YAML::ParserException& e) {
      throw ConfigError(fmt::format("{}: invalid YAML: {}", pos_of(path, e.mark).str(), e.msg),
                        "fix the syntax at that line and column");
    } catch (const YAML::Exception& e) {
      throw ConfigError(fmt::format("{}: cannot read YAML: {}", path, e.what()));
    }
    if (root.IsNull()) return;  // an empty file sets nothing
    if (!root.IsMap()) {
      throw ConfigError(fmt::format("{}: expected a mapping of flag names to values", pos_of(path, root.Mark()).str()),
                        "write one `flag_name: value` per line");
    }
    stack_.push_back(canonical);
    read_includes(path, root, out);
    for (auto it = root.begin(); it != root.end(); ++it) {
      const YAML::Node key = it->first;
      const YAML::Node value = it->second;
      read_entry(path, key, value, out);
    }
    stack_.pop_back();
  }

 private:
  void read_includes(const std::string& path, const YAML::Node& root, ConfigFile& out) {
    for (auto it = root.begin(); it != root.end(); ++it) {
      const YAML::Node key = it->first;
      const YAML::Node v = it->second;
      if (!key.IsScalar() || key.Scalar() != "include") continue;
      std::vector<YAML::Node> items;
      if (v.IsScalar()) {
        items.push_back(v);
      } else if (v.IsSequence()) {
        for (const auto& item : v) items.push_back(item);
      }
      if (items.empty()) {
        throw ConfigError(fmt::format("{}: 'include' expects a preset name, a file or a list of them",
                                      pos_of(path, v.Mark(), pos_of(path, key.Mark())).str()));
      }
      for (const auto& item : items) {
        if (!item.IsScalar()) {
          throw ConfigError(
              fmt::format("{}: 'include' entries must be names or paths", pos_of(path, item.Mark()).str()));
        }
        std::string target = item.Scalar();
        std::string resolved;
        if (looks_like_path(target)) {
          fs::path p(target);
          resolved = p.is_absolute() ? target : (fs::path(path).parent_path() / p).string();
        } else {
          try {
            resolved = resolve_preset_path(target, config_dir_);
          } catch (const ConfigError& e) {
            throw ConfigError(fmt::format("{}: {}", pos_of(path, item.Mark()).str(), e.what()), e.hint());
          }
        }
        read(resolved, out);
      }
    }
  }

  void read_entry(const std::string& path, const YAML::Node& key, const YAML::Node& value, ConfigFile& out) {
    const SourcePos key_pos = pos_of(path, key.Mark());
    if (!key.IsScalar()) throw ConfigError(fmt::format("{}: keys must be flag names", key_pos.str()));
    const std::string& name = key.Scalar();
    if (name == "include") return;
    if (name == "ENV") return read_env(path, key_pos, value, out);

    auto match = find_flag(normalize_flag_name(name));
    if (!match) {
      std::string msg = fmt::format("{}: unknown key '{}'", key_pos.str(), name);
      auto candidates = all_flag_names();
      candidates.push_back("ENV");
      candidates.push_back("include");
      if (auto s = suggest_name(normalize_flag_name(name), candidates); !s.empty()) {
        msg += fmt::format("; did you mean '{}'?", s);
      }
      throw ConfigError(msg, "keys are flag names as listed by `mtrain sft --help` (docs/FLAGS.md)");
    }
    Assignment a{name, *match, {}, pos_of(path, value.Mark(), key_pos)};
    if (value.IsNull()) {
      a.value.null = true;
    } else if (value.IsScalar()) {
      a.value.items.push_back(value.Scalar());
    } else if (value.IsSequence()) {
      for (const auto& item : value) {
        if (!item.IsScalar()) {
          throw ConfigError(fmt::format("{}: key '{}': list items must be plain values",
                                        pos_of(path, item.Mark(), a.pos).str(), name));
        }
        a.value.items.push_back(item.Scalar());
      }
    } else {
      throw ConfigError(fmt::format("{}: key '{}': got a mapping but expected a value or a list", a.pos.str(), name));
    }
    out.assignments.push_back(std::move(a));
  }

  static void read_env(const std::string& path, const SourcePos& key_pos, const YAML::Node& value, ConfigFile& out) {
    if (value.IsNull()) return;
    if (!value.IsMap()) {
      throw ConfigError(fmt::format("{}: 'ENV' must be a mapping of VARIABLE: value", key_pos.str()));
    }
    for (auto it = value.begin(); it != value.end(); ++it) {
      const YAML::Node k = it->first;
      const YAML::Node v = it->second;
      if (!k.IsScalar() || !v.IsScalar()) {
        throw ConfigError(
            fmt::format("{}: 'ENV' entries must be VARIABLE: value", pos_of(path, k.Mark(), key_pos).str()));
      }
      out.env.emplace_back(k.Scalar(), v.Scalar());
    }
  }

  std::string config_dir_;
  std::vector<std::string> stack_;  // canonical paths being read (cycle detection)
};

}  // namespace

ConfigFile read_config_file(const std::string& path, const std::string& config_dir) {
  ConfigFile out;
  Reader(config_dir).read(path, out);
  return out;
}

std::string resolve_preset_path(const std::string& name, const std::string& config_dir) {
  if (looks_like_path(name) && fs::is_regular_file(name)) return name;
  fs::path dir = fs::path(config_dir) / "models";
  fs::path candidate = dir / (name + ".yaml");
  if (!config_dir.empty() && fs::is_regular_file(candidate)) return candidate.string();
  const std::vector<std::string> names = yaml_names_in(dir.string());
  std::string msg = fmt::format("unknown model preset '{}'", name);
  if (auto s = suggest_name(name, names); !s.empty()) msg += fmt::format("; did you mean '{}'?", s);
  throw ConfigError(msg, names.empty() ? fmt::format("no presets found in {} (set MTRAIN_CONFIG_DIR)", dir.string())
                                       : fmt::format("available presets: {}", fmt::join(names, ", ")));
}

}  // namespace mtrain::config::detail
