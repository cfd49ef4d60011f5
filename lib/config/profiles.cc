// configs/ discovery and device profile loading.
#include "config/profiles.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <sstream>
#include <vector>

#include "common/errors.h"
#include "config/flags.h"

namespace mtrain::config {

namespace fs = std::filesystem;

namespace {

// <dir of this executable>/../share/mtrain/configs: where `cmake --install` puts
// them beside bin/mtrain. "" when /proc/self/exe cannot be read.
std::string installed_config_dir() {
#ifdef MTRAIN_CONFIGS_FROM_BINDIR
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && exe.has_parent_path()) return (exe.parent_path() / MTRAIN_CONFIGS_FROM_BINDIR).lexically_normal().string();
#endif
  return "";
}

}  // namespace

std::string find_config_dir() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("MTRAIN_CONFIG_DIR"); env != nullptr && *env != '\0') candidates.emplace_back(env);
  if (std::string installed = installed_config_dir(); !installed.empty()) candidates.push_back(std::move(installed));
#ifdef MTRAIN_SOURCE_DIR
  candidates.emplace_back(MTRAIN_SOURCE_DIR "/configs");
#endif
  candidates.emplace_back("configs");
  for (const auto& c : candidates) {
    if (fs::is_directory(c)) return c;
  }
  return "";
}

std::vector<std::string> yaml_names_in(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".yaml") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

namespace {

std::string where(const std::string& file, const YAML::Mark& m) {
  if (m.is_null()) return file;
  return fmt::format("{}:{}:{}", file, m.line + 1, m.column + 1);
}

}  // namespace

std::string resolve_device_profile_path(const std::string& name, const std::string& config_dir) {
  if (fs::is_regular_file(name)) return name;
  const auto ends_with = [&name](std::string_view suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (name.find('/') != std::string::npos || ends_with(".yaml") || ends_with(".yml"))
    throw ConfigError(fmt::format("device profile file '{}' does not exist", name),
                      "--device_profile takes a profile name (configs/devices/) or the path of a profile YAML file "
                      "(e.g. the one `mtrain calibrate --output` wrote)");
  fs::path dir = fs::path(config_dir.empty() ? find_config_dir() : config_dir) / "devices";
  if (fs::path p = dir / (name + ".yaml"); fs::is_regular_file(p)) return p.string();
  const std::vector<std::string> names = yaml_names_in(dir.string());
  // Names are case-insensitive (ascend910b3 is Ascend910B3): the file's own spelling is the profile's name.
  for (const std::string& n : names)
    if (lower(n) == lower(name)) return (dir / (n + ".yaml")).string();
  std::string msg = fmt::format("unknown device profile '{}'", name);
  // The suggestion is case-insensitive too (ascend910b: Ascend910B2), in the file's own spelling.
  std::vector<std::string> lowered;
  for (const std::string& n : names) lowered.push_back(lower(n));
  auto at = std::find(lowered.begin(), lowered.end(), suggest_name(lower(name), lowered));
  if (at == lowered.end() && !name.empty())  // a name cut short (h100-sxm for H100-SXM-80GB)
    at = std::find_if(lowered.begin(), lowered.end(),
                      [&](const std::string& n) { return n.rfind(lower(name), 0) == 0; });
  if (at != lowered.end()) msg += fmt::format("; did you mean '{}'?", names[at - lowered.begin()]);
  throw ConfigError(
      msg, names.empty() ? fmt::format("no profiles in {} (set MTRAIN_CONFIG_DIR)", dir.string())
                         : fmt::format("--device_profile takes one of: {}, or a YAML file", fmt::join(names, ", ")));
}

namespace {

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

using Setter = std::function<void(const std::string&, const YAML::Node&)>;
using Setters = std::vector<std::pair<std::string, Setter>>;

// Applies `setters` to every key of the map `node`; an unknown key is an error
// with a did-you-mean (`section` names a nested map, e.g. "cost.").
void apply_keys(const std::string& file, const YAML::Node& node, const Setters& setters, const std::string& section) {
  if (!node.IsMap())
    throw ConfigError(fmt::format("{}: expected a mapping of {}keys", where(file, node.Mark()), section));
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string key = it->first.Scalar();
    auto setter = std::find_if(setters.begin(), setters.end(), [&](const auto& s) { return s.first == key; });
    if (setter == setters.end()) {
      std::vector<std::string> keys;
      for (const auto& s : setters) keys.push_back(s.first);
      std::string msg =
          fmt::format("{}: unknown device profile key '{}{}'", where(file, it->first.Mark()), section, key);
      if (auto s = suggest_name(key, keys); !s.empty()) msg += fmt::format("; did you mean '{}{}'?", section, s);
      throw ConfigError(msg);
    }
    setter->second(key, it->second);
  }
}

// cpu_affinity: ["144-167", ...], one inclusive core range per device.
std::vector<device::CoreRange> core_ranges(const std::string& file, const YAML::Node& v) {
  std::vector<device::CoreRange> out;
  if (!v.IsSequence())
    throw ConfigError(
        fmt::format("{}: cpu_affinity: expected a list of \"first-last\" core ranges", where(file, v.Mark())));
  for (const auto& item : v) {
    const std::string t = item.IsScalar() ? item.Scalar() : "";
    int first = -1, last = -1;
    char dash = 0;
    std::istringstream in(t);
    if (!(in >> first >> dash >> last) || dash != '-' || first < 0 || last < first || !in.eof())
      throw ConfigError(
          fmt::format("{}: cpu_affinity: '{}' is not a core range first-last", where(file, item.Mark()), t));
    out.push_back({first, last});
  }
  return out;
}

// host_dispatch_us_by_task_queue: [level 0, level 1, level 2] in µs.
std::vector<double> task_queue_table(const std::string& file, const std::string& key, const YAML::Node& v) {
  if (!v.IsSequence() || v.size() != 3)
    throw ConfigError(
        fmt::format("{}: cost.{}: expected [level 0, level 1, level 2] in us", where(file, v.Mark()), key),
        "one host time per op for each TASK_QUEUE_ENABLE level, e.g. [18.8, 9.4, 9.4]");
  std::vector<double> out;
  for (const auto& e : v) {
    const double us = scalar_as<double>(file, "cost." + key, e);
    if (!(us >= 0)) throw ConfigError(fmt::format("{}: cost.{} must not be negative", where(file, e.Mark()), key));
    out.push_back(us * 1e-6);
  }
  return out;
}

Setters cost_setters(const std::string& file, device::CostConstants& c) {
  auto number = [&file](double* out, double scale) {
    return Setter([&file, out, scale](const std::string& k, const YAML::Node& v) {
      *out = scalar_as<double>(file, "cost." + k, v) * scale;
      if (!(*out >= 0)) throw ConfigError(fmt::format("{}: cost.{} must not be negative", where(file, v.Mark()), k));
    });
  };
  return {{"compute_efficiency", number(&c.compute_efficiency, 1)},
          {"flash_forward_efficiency", number(&c.flash_forward_efficiency, 1)},
          {"flash_backward_efficiency", number(&c.flash_backward_efficiency, 1)},
          {"memory_efficiency", number(&c.memory_efficiency, 1)},
          {"intra_link_efficiency", number(&c.intra_link_efficiency, 1)},
          {"inter_link_efficiency", number(&c.inter_link_efficiency, 1)},
          {"launch_overhead_us", number(&c.launch_overhead_s, 1e-6)},
          {"comm_latency_us", number(&c.comm_latency_s, 1e-6)},
          {"intra_step_latency_us", number(&c.intra_step_latency_s, 1e-6)},
          {"inter_step_latency_us", number(&c.inter_step_latency_s, 1e-6)},
          {"ll_latency_us", number(&c.ll_latency_s, 1e-6)},
          {"ll_intra_step_latency_us", number(&c.ll_intra_step_latency_s, 1e-6)},
          {"ll_inter_step_latency_us", number(&c.ll_inter_step_latency_s, 1e-6)},
          {"ll_bandwidth_share", number(&c.ll_bandwidth_share, 1)},
          {"tree_bandwidth_share", number(&c.tree_bandwidth_share, 1)},
          {"host_dispatch_us", number(&c.host_dispatch_s, 1e-6)},
          {"host_dispatch_us_by_task_queue", [&file, &c](const std::string& k, const YAML::Node& v) {
             c.host_dispatch_by_task_queue_s = task_queue_table(file, k, v);
           }}};
}

Setters runtime_setters(const std::string& file, device::RuntimeMemory& r) {
  auto mib = [&file](int64_t* out) {
    return Setter([&file, out](const std::string& k, const YAML::Node& v) {
      const double x = scalar_as<double>(file, "runtime." + k, v);
      if (!(x >= 0)) throw ConfigError(fmt::format("{}: runtime.{} must not be negative", where(file, v.Mark()), k));
      *out = static_cast<int64_t>(x * (1 << 20));
    });
  };
  auto share = [&file](double* out) {
    return Setter([&file, out](const std::string& k, const YAML::Node& v) {
      *out = scalar_as<double>(file, "runtime." + k, v);
      if (!(*out >= 0 && *out < 1))
        throw ConfigError(fmt::format("{}: runtime.{} must be a share in [0, 1)", where(file, v.Mark()), k));
    });
  };
  return {
      {"device_reserved_mib", mib(&r.device_reserved_bytes)},
      {"context_mib", mib(&r.context_bytes)},
      {"workspace_mib", mib(&r.workspace_bytes)},
      {"collective_library",
       [&file, &r](const std::string&, const YAML::Node& v) {
         using device::CollectiveLibrary;
         for (CollectiveLibrary l : {CollectiveLibrary::kNone, CollectiveLibrary::kHccl, CollectiveLibrary::kNccl})
           if (v.IsScalar() && v.Scalar() == device::collective_library_name(l)) {
             r.library = l;
             return;
           }
         throw ConfigError(fmt::format("{}: key 'runtime.collective_library': got '{}' but expected none, hccl or nccl",
                                       where(file, v.Mark()), v.IsScalar() ? v.Scalar() : "a non-scalar"));
       }},
      {"hccl_buffsize_mb", mib(&r.hccl_buffsize_bytes)},
      {"nccl_pair_mib", mib(&r.nccl_pair_bytes)},
      {"nccl_group_mib", mib(&r.nccl_group_bytes)},
      {"fragmentation", share(&r.fragmentation)},
      {"memory_margin", share(&r.memory_margin)}};
}

// all_gather_bus_gbps: [[ranks, GB/s], ...], group sizes rising.
std::vector<device::BusBandwidth> bus_table(const std::string& file, const std::string& key, const YAML::Node& v) {
  std::vector<device::BusBandwidth> out;
  const auto bad = [&](const YAML::Node& at, const std::string& why) {
    return ConfigError(fmt::format("{}: {}: {}", where(file, at.Mark()), key, why),
                       "write one [group size, GB/s] pair per measured group size, e.g. [[2, 38], [4, 64], [8, 149]]");
  };
  if (!v.IsSequence() || v.size() == 0) throw bad(v, "expected a list of [group size, GB/s] pairs");
  for (const auto& e : v) {
    if (!e.IsSequence() || e.size() != 2) throw bad(e, "expected a [group size, GB/s] pair");
    device::BusBandwidth b{scalar_as<int>(file, key, e[0]), scalar_as<double>(file, key, e[1])};
    if (b.ranks < 2 || !(b.gbps > 0)) throw bad(e, "the group size must be at least 2 and the bandwidth positive");
    if (!out.empty() && b.ranks <= out.back().ranks) throw bad(e, "group sizes must rise");
    out.push_back(b);
  }
  return out;
}

device::IntraNodeTopology topology(const std::string& file, const YAML::Node& v) {
  using device::IntraNodeTopology;
  for (IntraNodeTopology t : {IntraNodeTopology::kRing, IntraNodeTopology::kFullMesh, IntraNodeTopology::kSwitch})
    if (v.IsScalar() && v.Scalar() == device::topology_name(t)) return t;
  throw ConfigError(fmt::format("{}: key 'intra_node_topology': got '{}' but expected ring, full_mesh or switch",
                                where(file, v.Mark()), v.IsScalar() ? v.Scalar() : "a non-scalar"),
                    "full_mesh: a direct link between every pair (910B HCCS); switch: NVSwitch; ring: one link per "
                    "device");
}

Setters profile_setters(const std::string& file, DeviceProfileSpec& p, bool& has_hbm) {
  auto number = [&file](double* out) {
    return Setter([&file, out](const std::string& k, const YAML::Node& v) { *out = scalar_as<double>(file, k, v); });
  };
  auto integer = [&file](int64_t* out, int shift, bool* seen) {
    return Setter([&file, out, shift, seen](const std::string& k, const YAML::Node& v) {
      *out = scalar_as<int64_t>(file, k, v) << shift;
      if (seen != nullptr) *seen = true;
    });
  };
  auto text = [](std::string* out) {
    return Setter([out](const std::string&, const YAML::Node& v) { *out = v.Scalar(); });
  };
  auto count = [&file](int* out) {
    return Setter([&file, out](const std::string& k, const YAML::Node& v) { *out = scalar_as<int>(file, k, v); });
  };
  return {
      {"name", text(&p.name)},
      {"chip_name", text(&p.chip_name)},
      {"hbm_bytes", integer(&p.hbm_bytes, 0, &has_hbm)},
      {"hbm_gib", integer(&p.hbm_bytes, 30, &has_hbm)},
      {"hbm_mib", integer(&p.hbm_bytes, 20, &has_hbm)},
      {"peak_tflops_16bit", number(&p.peak_tflops_16bit)},
      {"peak_tflops_fp32", number(&p.peak_tflops_fp32)},
      {"hbm_gbps", number(&p.hbm_gbps)},
      {"intra_node_link_gbps", number(&p.intra_node_link_gbps)},
      {"inter_node_link_gbps", number(&p.inter_node_link_gbps)},
      {"intra_node_link", text(&p.intra_node_link)},
      {"intra_node_topology",
       [&file, &p](const std::string&, const YAML::Node& v) { p.intra_node_topology = topology(file, v); }},
      {"devices_per_node", count(&p.devices_per_node)},
      {"allocator_block_bytes", integer(&p.allocator_block_bytes, 0, nullptr)},
      {"cpu_cores_per_node", count(&p.cpu_cores_per_node)},
      {"compute_units", count(&p.compute_units)},
      {"gemm_tile_m", count(&p.gemm_tile_m)},
      {"gemm_tile_n", count(&p.gemm_tile_n)},
      {"attention_block", count(&p.attention_block)},
      {"tp_overlap_units", count(&p.tp_overlap_units)},
      {"dp_comm_units", count(&p.dp_comm_units)},
      {"all_gather_bus_gbps",
       [&file, &p](const std::string& k, const YAML::Node& v) { p.all_gather_bus_gbps = bus_table(file, k, v); }},
      {"all_reduce_bus_gbps",
       [&file, &p](const std::string& k, const YAML::Node& v) { p.all_reduce_bus_gbps = bus_table(file, k, v); }},
      {"cpu_affinity", [&file, &p](const std::string&, const YAML::Node& v) { p.cpu_affinity = core_ranges(file, v); }},
      {"cost", [&file, &p](const std::string&,
                           const YAML::Node& v) { apply_keys(file, v, cost_setters(file, p.cost), "cost."); }},
      {"runtime",
       [&file, &p](const std::string&, const YAML::Node& v) {
         apply_keys(file, v, runtime_setters(file, p.runtime), "runtime.");
       }},
  };
}

void check_profile(const std::string& file, const DeviceProfileSpec& p, bool has_hbm) {
  if (!has_hbm || p.hbm_bytes <= 0) {
    throw ConfigError(fmt::format("{}: device profile needs a positive hbm_bytes (or hbm_gib / hbm_mib)", file));
  }
  if (p.peak_tflops_16bit <= 0 || p.peak_tflops_fp32 <= 0 || p.hbm_gbps <= 0 || p.devices_per_node < 1 ||
      p.allocator_block_bytes <= 0 || p.cpu_cores_per_node < 1 || p.compute_units < 0 || p.gemm_tile_m < 0 ||
      p.gemm_tile_n < 0 || p.attention_block < 1 || p.tp_overlap_units < 0 || p.dp_comm_units < 0 ||
      (p.compute_units > 0 && (p.tp_overlap_units >= p.compute_units || p.dp_comm_units >= p.compute_units))) {
    throw ConfigError(
        fmt::format("{}: peak_tflops_16bit, peak_tflops_fp32, hbm_gbps, devices_per_node, "
                    "allocator_block_bytes, cpu_cores_per_node and attention_block must be positive "
                    "(compute_units, gemm_tile_m, gemm_tile_n, tp_overlap_units and dp_comm_units not negative, "
                    "tp_overlap_units and dp_comm_units below compute_units)",
                    file));
  }
  if (!p.cpu_affinity.empty() && static_cast<int>(p.cpu_affinity.size()) != p.devices_per_node)
    throw ConfigError(fmt::format("{}: cpu_affinity lists {} ranges for {} devices_per_node", file,
                                  p.cpu_affinity.size(), p.devices_per_node));
  for (const auto& r : p.cpu_affinity) {
    if (r.last >= p.cpu_cores_per_node)
      throw ConfigError(fmt::format("{}: cpu_affinity range {}-{} goes beyond cpu_cores_per_node ({})", file, r.first,
                                    r.last, p.cpu_cores_per_node));
  }
}

}  // namespace

void apply_task_queue(DeviceProfileSpec& p, const char* env) {
  if (p.cost.host_dispatch_by_task_queue_s.empty()) return;
  int level = 1;  // torch_npu's default
  if (env != nullptr && *env != '\0') {
    const std::string v = env;
    if (v != "0" && v != "1" && v != "2")
      throw ConfigError(fmt::format("TASK_QUEUE_ENABLE={}: expected 0, 1 or 2", v),
                        "torch_npu's task queue: 0 off, 1 two-stage dispatch (the default), 2 rebalanced two-stage");
    level = v[0] - '0';
  }
  p.task_queue_enable = level;
  p.cost.host_dispatch_s = p.cost.host_dispatch_by_task_queue_s[level];
}

void apply_hccl_buffsize(DeviceProfileSpec& p, const char* env) {
  if (p.runtime.library != device::CollectiveLibrary::kHccl || env == nullptr || *env == '\0') return;
  const std::string v = env;
  int64_t mb = 0;
  const bool digits = std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (digits && v.size() <= 7) mb = std::stoll(v);
  if (!digits || mb < 1 || v.size() > 7)
    throw ConfigError(fmt::format("HCCL_BUFFSIZE={}: expected a whole number of MB, at least 1", v),
                      "HCCL reserves 2 x HCCL_BUFFSIZE MB of device memory per communicator (CANN's default: 200)");
  p.runtime.hccl_buffsize_bytes = mb << 20;
}

namespace {

DeviceProfileSpec read_device_profile(const std::string& file) {
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
  p.intra_node_topology = device::IntraNodeTopology::kRing;  // the conservative model unless the profile says
  p.name = fs::path(file).stem().string();
  p.chip_name.clear();
  // The rates have no default: a profile states them (device/profile.h's defaults are the 910B3's).
  p.peak_tflops_16bit = p.peak_tflops_fp32 = p.hbm_gbps = p.intra_node_link_gbps = p.inter_node_link_gbps = 0;
  bool has_hbm = false;
  apply_keys(file, root, profile_setters(file, p, has_hbm), "");
  check_profile(file, p, has_hbm);
  if (p.chip_name.empty()) p.chip_name = p.name;
  return p;
}

// A file's identity for the cache: its path, size and modification time (a
// profile rewritten in place, as `mtrain calibrate` may, is read again).
struct FileStamp {
  std::string path;
  uintmax_t size = 0;
  fs::file_time_type written{};
  bool operator==(const FileStamp&) const = default;
};

// The profiles read so far (`mtrain plan` dry-runs thousands of layouts on one
// profile; the search's threads share them).
std::mutex profile_cache_mutex;
std::vector<std::pair<FileStamp, DeviceProfileSpec>> profile_cache;

}  // namespace

DeviceProfileSpec load_device_profile(const std::string& name_or_path, const std::string& config_dir) {
  const std::string file = resolve_device_profile_path(name_or_path, config_dir);
  std::error_code ec;
  FileStamp stamp{file, fs::file_size(file, ec), {}};
  if (!ec) stamp.written = fs::last_write_time(file, ec);
  std::optional<DeviceProfileSpec> p;
  if (!ec) {
    const std::lock_guard<std::mutex> lock(profile_cache_mutex);
    for (const auto& [s, cached] : profile_cache)
      if (s == stamp) p = cached;
  }
  if (!p) {
    p = read_device_profile(file);
    if (!ec) {
      const std::lock_guard<std::mutex> lock(profile_cache_mutex);
      profile_cache.emplace_back(stamp, *p);
    }
  }
  apply_task_queue(*p, std::getenv("TASK_QUEUE_ENABLE"));
  apply_hccl_buffsize(*p, std::getenv("HCCL_BUFFSIZE"));
  return *p;
}

}  // namespace mtrain::config
