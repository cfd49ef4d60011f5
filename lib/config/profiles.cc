// configs/ discovery and device profile loading.
#include "config/profiles.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <vector>

#include "common/errors.h"
#include "config/flags.h"

namespace mtrain::config {

namespace fs = std::filesystem;

std::string find_config_dir() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("MTRAIN_CONFIG_DIR"); env != nullptr && *env != '\0') candidates.emplace_back(env);
#ifdef MTRAIN_SOURCE_DIR
  candidates.emplace_back(MTRAIN_SOURCE_DIR "/configs");
#endif
  candidates.emplace_back("configs");
  for (const auto& c : candidates) {
    if (fs::is_directory(c)) return c;
  }
  return "";
}

namespace {

std::string where(const std::string& file, const YAML::Mark& m) {
  if (m.is_null()) return file;
  return fmt::format("{}:{}:{}", file, m.line + 1, m.column + 1);
}

std::string resolve_device_path(const std::string& name, const std::string& config_dir) {
  if (fs::is_regular_file(name)) return name;
  fs::path dir = fs::path(config_dir.empty() ? find_config_dir() : config_dir) / "devices";
  if (fs::path p = dir / (name + ".yaml"); fs::is_regular_file(p)) return p.string();
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".yaml") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  std::string msg = fmt::format("unknown device profile '{}'", name);
  if (auto s = suggest_name(name, names); !s.empty()) msg += fmt::format("; did you mean '{}'?", s);
  throw ConfigError(
      msg, names.empty() ? fmt::format("no profiles in {} (set MTRAIN_CONFIG_DIR)", dir.string())
                         : fmt::format("--device_profile takes one of: {}, or a YAML file", fmt::join(names, ", ")));
}

template <class T>
T scalar_as(const std::string& file, const std::string& key, const YAML::Node& v) {
  try {
    return v.as<T>();
  } catch (const YAML::Exception&) {
    throw ConfigError(fmt::format("{}: key '{}': got '{}' but expected {}", where(file, v.Mark()), key,
                                  v.IsScalar() ? v.Scalar() : "a structure",
                                  std::is_floating_point_v<T> ? "a number" : "an integer"));
  }
}

}  // namespace

DeviceProfileSpec load_device_profile(const std::string& name_or_path, const std::string& config_dir) {
  const std::string file = resolve_device_path(name_or_path, config_dir);
  YAML::Node root;
  try {
    root = YAML::LoadFile(file);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(fmt::format("{}: invalid YAML: {}", where(file, e.mark), e.msg));
  } catch (const YAML::Exception& e) {
    throw ConfigError(fmt::format("{}: cannot read: {}", file, e.what()));
  }
  if (!root.IsMap()) throw ConfigError(fmt::format("{}: expected a mapping of profile keys", file));

  DeviceProfileSpec p;
  p.name = fs::path(file).stem().string();
  bool has_hbm = false;
  using Setter = std::function<void(const std::string&, const YAML::Node&)>;
  auto number = [&file](double* out) {
    return Setter([&file, out](const std::string& k, const YAML::Node& v) { *out = scalar_as<double>(file, k, v); });
  };
  auto integer = [&file](int64_t* out, int shift, bool* seen) {
    return Setter([&file, out, shift, seen](const std::string& k, const YAML::Node& v) {
      *out = scalar_as<int64_t>(file, k, v) << shift;
      if (seen != nullptr) *seen = true;
    });
  };
  const std::vector<std::pair<std::string, Setter>> setters = {
      {"name", [&p](const std::string&, const YAML::Node& v) { p.name = v.Scalar(); }},
      {"hbm_bytes", integer(&p.hbm_bytes, 0, &has_hbm)},
      {"hbm_gib", integer(&p.hbm_bytes, 30, &has_hbm)},
      {"hbm_mib", integer(&p.hbm_bytes, 20, &has_hbm)},
      {"peak_tflops_16bit", number(&p.peak_tflops_16bit)},
      {"peak_tflops_fp32", number(&p.peak_tflops_fp32)},
      {"hbm_gbps", number(&p.hbm_gbps)},
      {"intra_node_link_gbps", number(&p.intra_node_link_gbps)},
      {"inter_node_link_gbps", number(&p.inter_node_link_gbps)},
      {"devices_per_node",
       [&](const std::string& k, const YAML::Node& v) { p.devices_per_node = scalar_as<int>(file, k, v); }},
      {"allocator_block_bytes", integer(&p.allocator_block_bytes, 0, nullptr)},
  };
  for (auto it = root.begin(); it != root.end(); ++it) {
    const YAML::Node key_node = it->first;
    const YAML::Node value = it->second;
    const std::string key = key_node.Scalar();
    auto setter = std::find_if(setters.begin(), setters.end(), [&](const auto& s) { return s.first == key; });
    if (setter == setters.end()) {
      std::vector<std::string> keys;
      for (const auto& s : setters) keys.push_back(s.first);
      std::string msg = fmt::format("{}: unknown device profile key '{}'", where(file, key_node.Mark()), key);
      if (auto s = suggest_name(key, keys); !s.empty()) msg += fmt::format("; did you mean '{}'?", s);
      throw ConfigError(msg);
    }
    setter->second(key, value);
  }
  if (!has_hbm || p.hbm_bytes <= 0) {
    throw ConfigError(fmt::format("{}: device profile needs a positive hbm_bytes (or hbm_gib / hbm_mib)", file));
  }
  if (p.peak_tflops_16bit <= 0 || p.peak_tflops_fp32 <= 0 || p.hbm_gbps <= 0 || p.devices_per_node < 1 ||
      p.allocator_block_bytes <= 0) {
    throw ConfigError(
        fmt::format("{}: peak_tflops_16bit, peak_tflops_fp32, hbm_gbps, devices_per_node and "
                    "allocator_block_bytes must be positive",
                    file));
  }
  return p;
}

}  // namespace mtrain::config
