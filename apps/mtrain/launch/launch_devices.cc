#include "mtrain/launch/launch_devices.h"

#include <fmt/format.h>

#include <set>

#include "common/errors.h"

namespace mtrain::launch {

namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

std::vector<int> parse_device_list(const std::string& variable, const std::string& value, int pool_size) {
  std::vector<int> ids;
  std::set<int> seen;
  if (trim(value).empty()) return ids;  // set but empty: no device is visible
  size_t start = 0;
  for (;;) {
    const size_t comma = value.find(',', start);
    const std::string item = trim(value.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    const auto n = parse_integer(item);
    if (!n) {
      throw DistributedError(fmt::format("{}={}: '{}' is not a device index", variable, value, item),
                             fmt::format("{} is a comma list of device indices, e.g. 0,1,2,3", variable));
    }
    if (*n >= pool_size) {
      throw DistributedError(fmt::format("{}={}: device {} does not exist (this node has {} devices, 0-{})", variable,
                                         value, *n, pool_size, pool_size - 1),
                             "the pool size is the device profile's devices_per_node (MTRAIN_DEVICES_PER_NODE "
                             "overrides it)");
    }
    if (!seen.insert(static_cast<int>(*n)).second) {
      throw DistributedError(fmt::format("{}={}: device {} is listed twice", variable, value, *n),
                             "list each device once");
    }
    ids.push_back(static_cast<int>(*n));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return ids;
}

}  // namespace

std::string VisibleDevices::describe() const {
  if (variable.empty()) return fmt::format("npu:0-{} (all {})", pool_size - 1, pool_size);
  if (ids.empty()) return fmt::format("none ({}={})", variable, value);
  return fmt::format("npu:{} ({}={})", fmt::join(ids, ","), variable, value);
}

int device_pool_size(const Env& env, int profile_devices_per_node) {
  auto v = env.get("MTRAIN_DEVICES_PER_NODE");
  if (!v || v->empty()) return profile_devices_per_node;
  auto n = parse_integer(*v);
  if (!n || *n < 1 || *n > 4096) {
    throw DistributedError(fmt::format("MTRAIN_DEVICES_PER_NODE={} is not a device count in [1, 4096]", *v),
                           "unset it to use the device profile's devices_per_node");
  }
  return static_cast<int>(*n);
}

VisibleDevices visible_devices(const Env& env, int pool_size, std::vector<std::string>* warnings) {
  VisibleDevices v;
  v.pool_size = pool_size;
  const auto ascend = env.get("ASCEND_RT_VISIBLE_DEVICES");
  const auto cuda = env.get("CUDA_VISIBLE_DEVICES");
  if (ascend && cuda && trim(*ascend) != trim(*cuda) && warnings) {
    warnings->push_back(
        fmt::format("ASCEND_RT_VISIBLE_DEVICES={} and CUDA_VISIBLE_DEVICES={} differ; using "
                    "ASCEND_RT_VISIBLE_DEVICES",
                    *ascend, *cuda));
  }
  if (ascend) {
    v.variable = "ASCEND_RT_VISIBLE_DEVICES";
    v.value = *ascend;
  } else if (cuda) {
    v.variable = "CUDA_VISIBLE_DEVICES";
    v.value = *cuda;
  } else {
    for (int i = 0; i < pool_size; ++i) v.ids.push_back(i);
    return v;
  }
  v.ids = parse_device_list(v.variable, v.value, pool_size);
  return v;
}

int bind_local_rank(const VisibleDevices& v, int local_rank, int local_size) {
  const int visible = static_cast<int>(v.ids.size());
  if (local_size > visible) {
    const std::string what = v.variable.empty() ? fmt::format("this node has {} devices", visible)
                                                : fmt::format("{}={} makes {} of this node's {} devices visible",
                                                              v.variable, v.value, visible, v.pool_size);
    throw DistributedError(
        fmt::format("{} local ranks do not fit: {} (one device per rank)", local_size, what),
        fmt::format("run at most {} ranks per node (NPROC_PER_NODE / mpirun -np), or make more devices visible",
                    visible));
  }
  return v.ids.at(static_cast<size_t>(local_rank));
}

}  // namespace mtrain::launch
