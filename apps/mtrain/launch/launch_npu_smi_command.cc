#include "mtrain/launch/launch_npu_smi_command.h"

#include <fmt/format.h>

#include <set>

#include "common/errors.h"
#include "config/args.h"
#include "config/profiles.h"
#include "device/cpu_affinity.h"
#include "device/npu_smi.h"
#include "device/npu_status.h"
#include "mtrain/launch/launch_devices.h"

namespace mtrain::launch {

namespace {

constexpr const char* kUsage = "mtrain npu-smi info [-t topo] [--device_profile NAME|FILE]";

std::string value_of(const std::vector<std::string>& args, size_t& i, const std::string& name) {
  const size_t eq = args[i].find('=');
  if (eq != std::string::npos) return args[i].substr(eq + 1);
  if (i + 1 >= args.size()) throw UsageError(fmt::format("{} needs a value", name), kUsage);
  return args[++i];
}

}  // namespace

NpuSmiOptions parse_npu_smi_args(const std::vector<std::string>& args) {
  NpuSmiOptions o;
  if (!args.empty() && (args[0] == "-h" || args[0] == "--help")) {
    o.help = true;
    return o;
  }
  if (args.empty() || args[0] != "info")
    throw UsageError(fmt::format("mtrain npu-smi: {} is not simulated; only `info` is",
                                 args.empty() ? std::string("a bare npu-smi") : "'" + args[0] + "'"),
                     kUsage);
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string name = args[i].substr(0, args[i].find('='));
    if (name == "-h" || name == "--help") {
      o.help = true;
    } else if (name == "-t") {
      const std::string type = value_of(args, i, name);
      if (type != "topo")
        throw UsageError(fmt::format("mtrain npu-smi info -t {}: only -t topo is simulated", type), kUsage);
      o.topo = true;
    } else if (name == "--device_profile" || name == "--device-profile") {
      o.device_profile = value_of(args, i, name);
    } else {
      throw UsageError(fmt::format("unknown argument '{}' for mtrain npu-smi info", args[i]), kUsage);
    }
  }
  return o;
}

std::string npu_smi_help() {
  return fmt::format(
      "usage: {}\n\n"
      "Prints this node's simulated NPU pool in the layout of Ascend's `npu-smi info`: one row pair\n"
      "per device (name, health, HBM usage / capacity) and the process table: every mtrain rank\n"
      "running on this machine, its device and its reserved HBM (live: ranks publish it at every\n"
      "log interval under $MTRAIN_NPU_STATUS_DIR, default /dev/shm/mtrain-npu). A simulated device\n"
      "has no power, temperature or AI-core load: those columns are NA / 0, the Bus-Id is synthetic.\n\n"
      "  -t topo           the NPU x NPU link matrix and each NPU's CPU affinity (the profile's node,\n"
      "                    then those ranges on this machine, as CPU_AFFINITY_CONF uses them)\n"
      "  --device_profile  configs/devices/<NAME>.yaml or a YAML file (default Ascend910B3)\n\n"
      "MTRAIN_DEVICES_PER_NODE overrides the profile's devices_per_node. See README \"The simulated NPU pool\".\n",
      kUsage);
}

int run_npu_smi_command(const NpuSmiOptions& options, const Env& env, std::ostream& out) {
  const std::string name = options.device_profile.empty() ? config::Args{}.device_profile : options.device_profile;
  device::DeviceProfile profile;
  try {
    profile = config::load_device_profile(name);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("--device_profile {}: {}", name, e.what()), e.hint());
  }
  const int pool = device_pool_size(env, profile.devices_per_node);
  if (options.topo) {
    out << device::format_npu_smi_topo(profile, pool, device::allowed_cpus());
    return 0;
  }
  std::vector<std::string> warnings;
  const auto procs = device::read_npu_status(device::npu_status_dir(), &warnings);
  for (const auto& w : warnings) fmt::print(stderr, "mtrain: warning: {}\n", w);
  std::set<int> nodes = {0};  // node 0 always; more when loopback "nodes" share this machine
  for (const auto& p : procs) nodes.insert(p.node);
  for (int node : nodes) {
    std::vector<device::NpuProcessStatus> mine;
    for (const auto& p : procs)
      if (p.node == node) mine.push_back(p);
    out << device::format_npu_smi_info(profile, pool, node, mine);
  }
  return 0;
}

}  // namespace mtrain::launch
