#include "device/cpu_affinity.h"

#include <dirent.h>
#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>

#include "common/errors.h"

namespace mtrain::device {

namespace {

constexpr const char* kSyntax =
    "CPU_AFFINITY_CONF=<mode>[,npu<id>:<first core>-<last core>]...[,npu_affine:0|1]; mode 0 = off, 1 = the rank's "
    "threads on its NPU's cores, 2 = main and compute threads each on a fixed core; e.g. 1,npu0:0-1,npu1:2-3";

std::optional<int> parse_int(std::string_view s) {
  int v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

[[noreturn]] void bad(const std::string& value, const std::string& what) {
  throw ConfigError(fmt::format("CPU_AFFINITY_CONF={}: {}", value, what), kSyntax);
}

// "npu<id>:<first>-<last>" -> (id, range); nullopt when the shape is wrong.
std::optional<std::pair<int, CoreRange>> parse_npu_range(const std::string& item) {
  const size_t colon = item.find(':');
  const size_t dash = item.find('-', colon == std::string::npos ? 0 : colon);
  if (item.rfind("npu", 0) != 0 || colon == std::string::npos || dash == std::string::npos) return std::nullopt;
  const auto id = parse_int(std::string_view(item).substr(3, colon - 3));
  const auto first = parse_int(std::string_view(item).substr(colon + 1, dash - colon - 1));
  const auto last = parse_int(std::string_view(item).substr(dash + 1));
  if (!id || !first || !last) return std::nullopt;
  return std::make_pair(*id, CoreRange{*first, *last});
}

std::vector<int> slice(const std::vector<int>& cores, int lo, int hi) {
  return std::vector<int>(cores.begin() + lo, cores.begin() + hi + 1);
}

}  // namespace

AffinityConf parse_cpu_affinity_conf(const std::string& value) {
  AffinityConf conf;
  std::vector<std::string> items;
  for (size_t start = 0;;) {
    const size_t comma = value.find(',', start);
    items.push_back(trim(value.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (items.size() == 1 && items[0].empty()) return conf;  // set but empty: off, like unset
  const auto mode = parse_int(items[0]);
  if (!mode || *mode > 2) bad(value, fmt::format("the first item '{}' must be the mode 0, 1 or 2", items[0]));
  conf.mode = *mode;
  for (size_t i = 1; i < items.size(); ++i) {
    const std::string& item = items[i];
    if (item.rfind("npu_affine:", 0) == 0) {
      const auto on = parse_int(item.substr(11));
      if (!on || *on > 1) bad(value, fmt::format("'{}': npu_affine takes 0 or 1", item));
      conf.npu_affine = *on == 1;
      continue;
    }
    const auto range = parse_npu_range(item);
    if (!range) bad(value, fmt::format("'{}' is not npu<id>:<first core>-<last core>", item));
    const auto& [id, r] = *range;
    if (r.first > r.last)
      bad(value, fmt::format("'{}': the first core {} is after the last core {}", item, r.first, r.last));
    if (!conf.ranges.emplace(id, r).second) bad(value, fmt::format("npu{} is given twice", id));
  }
  return conf;
}

std::vector<int> scale_to_machine(CoreRange range, int npu, int pool_size, int node_cores,
                                  const std::vector<int>& machine_cores) {
  const int m = static_cast<int>(machine_cores.size());
  if (m >= node_cores) return slice(machine_cores, range.first, std::min(range.last, m - 1));
  if (m < pool_size) return {machine_cores[npu % m]};  // fewer cores than devices: one each, shared
  const auto scaled = [&](int64_t core) { return static_cast<int>(core * m / node_cores); };
  const int lo = scaled(range.first);
  return slice(machine_cores, lo, std::max(lo, scaled(int64_t{range.last} + 1) - 1));
}

AffinityPlan plan_cpu_affinity(const AffinityConf& conf, const DeviceProfile& profile, int npu, int pool_size,
                               const std::vector<int>& machine_cores) {
  AffinityPlan plan;
  if (conf.mode == 0 || machine_cores.empty()) return plan;
  // Every rank checks every override, so all ranks fail alike on a bad one.
  for (const auto& [id, r] : conf.ranges) {
    if (id >= pool_size)
      throw ConfigError(fmt::format("CPU_AFFINITY_CONF: npu{} does not exist (this node has {} devices, npu0-{})", id,
                                    pool_size, pool_size - 1),
                        kSyntax);
    for (int c = r.first; c <= r.last; ++c) {
      if (!std::binary_search(machine_cores.begin(), machine_cores.end(), c))
        throw ConfigError(
            fmt::format("CPU_AFFINITY_CONF: npu{}:{}-{}: core {} is not available to this process (it may use {})", id,
                        r.first, r.last, c, format_core_list(machine_cores)),
            "give ranges within the cores `nproc` / Cpus_allowed_list shows");
    }
  }
  const int m = static_cast<int>(machine_cores.size());
  if (auto it = conf.ranges.find(npu); it != conf.ranges.end()) {
    for (int c = it->second.first; c <= it->second.last; ++c) plan.cores.push_back(c);
    plan.note = fmt::format("npu{}:{}-{} from CPU_AFFINITY_CONF", npu, it->second.first, it->second.last);
    return plan;
  }
  const CoreRange range = conf.npu_affine ? profile.affinity_of(npu, pool_size)
                                          : even_core_share(npu, pool_size, profile.cpu_cores_per_node);
  plan.cores = scale_to_machine(range, npu, pool_size, profile.cpu_cores_per_node, machine_cores);
  plan.note =
      fmt::format("{} of npu{} on one {} node ({} cores): {}-{}", conf.npu_affine ? "NUMA affinity" : "even share", npu,
                  profile.name, profile.cpu_cores_per_node, range.first, range.last);
  if (m < profile.cpu_cores_per_node)
    plan.note += fmt::format("; this machine has {} cores, so the range is scaled to {}", m,
                             m < pool_size ? "one core per device, shared round-robin" : "its share of them");
  return plan;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cores;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cores.push_back(c);
  return cores;
}

void bind_thread(int tid, const std::vector<int>& cores) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cores) CPU_SET(c, &set);
  if (sched_setaffinity(tid, sizeof(set), &set) != 0 && errno != ESRCH)  // ESRCH: the thread just ended
    throw Error(ExitCode::kConfig,
                fmt::format("CPU_AFFINITY_CONF: cannot bind thread {} to cores {}: {}", tid, format_core_list(cores),
                            std::strerror(errno)),
                "check the cores are allowed for this process (taskset -p, the container's cpuset)");
}

std::vector<int> process_threads() {
  std::vector<int> tids;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return tids;
  while (const dirent* e = readdir(d)) {
    if (auto tid = parse_int(e->d_name)) tids.push_back(*tid);
  }
  closedir(d);
  std::sort(tids.begin(), tids.end());
  return tids;
}

std::string format_core_list(const std::vector<int>& cores) {
  std::string s;
  for (size_t i = 0; i < cores.size();) {
    size_t j = i;
    while (j + 1 < cores.size() && cores[j + 1] == cores[j] + 1) ++j;
    if (!s.empty()) s.push_back(',');
    s += j == i ? std::to_string(cores[i]) : fmt::format("{}-{}", cores[i], cores[j]);
    i = j + 1;
  }
  return s;
}

}  // namespace mtrain::device
