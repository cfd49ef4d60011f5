#include "device/npu_smi.h"

#include <fmt/format.h>

#include "device/cpu_affinity.h"

namespace mtrain::device {

namespace {

// Column widths between the '|' of npu-smi's table (27 + 15 + 52 characters).
constexpr int kW1 = 27, kW2 = 15, kW3 = 52;

std::string rule(char c) {
  return fmt::format("+{}+{}+{}+\n", std::string(kW1, c), std::string(kW2, c), std::string(kW3, c));
}

std::string row(const std::string& a, const std::string& b, const std::string& c) {
  return fmt::format("| {:<{}}| {:<{}}| {:<{}}|\n", a, kW1 - 1, b, kW2 - 1, c, kW3 - 1);
}

int64_t mib(int64_t bytes) { return (bytes + (1 << 20) - 1) >> 20; }

std::string usage(int64_t used, int64_t total) { return fmt::format("{:<4} / {}", used, total); }

// A process's HBM as npu-smi counts it: its allocator's reserve and what its
// runtime holds beside it (context, workspaces, collective buffers), not
// what the device keeps for itself.
int64_t process_bytes(const NpuProcessStatus& s) {
  return s.memory.reserved + s.memory.runtime_bytes() -
         s.memory.runtime[static_cast<int>(RuntimeKind::kDeviceReserved)];
}

std::string chip_rows(const DeviceProfile& p, int npu, const std::vector<NpuProcessStatus>& procs) {
  // The device's own reservation is in use with no process on it, as on an idle 910B.
  int64_t used = p.runtime.device_reserved_bytes, capacity = p.hbm_bytes;
  std::string chip = p.chip_name;
  for (const auto& s : procs) {
    if (s.npu != npu) continue;
    used += process_bytes(s);
    capacity = s.hbm_bytes;  // the rank's own profile, when it runs another
    chip = s.chip_name;
  }
  return row(fmt::format("{:<6}{}", npu, chip), "OK", fmt::format("{:<12}{:<18}{}", "NA", "NA", usage(0, 0))) +
         row("0", fmt::format("0000:{:02X}:00.0", npu + 1),
             fmt::format("{:<12}{:<18}{}", 0, usage(0, 0), usage(mib(used), mib(capacity)))) +
         rule('=');
}

std::string process_rows(int npu, const std::vector<NpuProcessStatus>& procs) {
  std::string s;
  for (const auto& p : procs) {
    if (p.npu != npu) continue;
    // The last column is split in two, as npu-smi's process table does.
    s += row(fmt::format("{:<8}{}", npu, 0), std::to_string(p.pid),
             fmt::format("{:<25}| {}", p.process_name.substr(0, 24), mib(process_bytes(p))));
  }
  if (s.empty())
    s = fmt::format("| {:<{}}|\n", fmt::format("No running processes found in NPU {}", npu), kW1 + kW2 + kW3 + 1);
  return s + rule('=');
}

}  // namespace

std::string format_npu_smi_info(const DeviceProfile& profile, int pool_size, int node,
                                const std::vector<NpuProcessStatus>& procs) {
  std::string out = fmt::format("+{}+\n", std::string(kW1 + kW2 + kW3 + 2, '-'));
  out +=
      fmt::format("| {:<{}}|\n", fmt::format("mtrain npu-smi (simulated)   node {}   profile {}", node, profile.name),
                  kW1 + kW2 + kW3 + 1);
  out += rule('-');
  out += row("NPU   Name", "Health", "Power(W)    Temp(C)           Hugepages-Usage(page)");
  out += row("Chip", "Bus-Id", "AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)");
  out += rule('=');
  for (int npu = 0; npu < pool_size; ++npu) out += chip_rows(profile, npu, procs);
  out += rule('-');
  out += row("NPU     Chip", "Process id", "Process name             | Process memory(MB)");
  out += rule('=');
  for (int npu = 0; npu < pool_size; ++npu) out += process_rows(npu, procs);
  return out;
}

std::string format_npu_smi_topo(const DeviceProfile& profile, int pool_size, const std::vector<int>& machine_cores) {
  std::string out = fmt::format("{:<11}", "");
  for (int j = 0; j < pool_size; ++j) out += fmt::format("{:<11}", fmt::format("NPU{}", j));
  out += "CPU Affinity\n";
  for (int i = 0; i < pool_size; ++i) {
    out += fmt::format("{:<11}", fmt::format("NPU{}", i));
    for (int j = 0; j < pool_size; ++j) out += fmt::format("{:<11}", i == j ? "X" : profile.intra_node_link);
    const CoreRange r = profile.affinity_of(i, pool_size);
    out += fmt::format("{}-{}\n", r.first, r.last);
  }
  out += fmt::format(
      "\nLegend:\n\n  X    = the device itself\n  {:<4} = {} link between two devices of one node ({} GB/s per "
      "direction in the profile, topology {})\n\n",
      profile.intra_node_link, profile.intra_node_link, profile.intra_node_link_gbps,
      device::topology_name(profile.intra_node_topology));
  out += fmt::format("CPU Affinity: cores of each device's NUMA node on one {} node ({} cores).\n", profile.name,
                     profile.cpu_cores_per_node);
  const int m = static_cast<int>(machine_cores.size());
  out += fmt::format(
      "This machine lets mtrain use {} core{} ({}); CPU_AFFINITY_CONF=1,npu_affine:1 maps the ranges to{}:\n", m,
      m == 1 ? "" : "s", format_core_list(machine_cores),
      m < profile.cpu_cores_per_node ? " (scaled to this machine)" : "");
  for (int i = 0; i < pool_size; ++i) {
    const auto cores =
        scale_to_machine(profile.affinity_of(i, pool_size), i, pool_size, profile.cpu_cores_per_node, machine_cores);
    out += fmt::format("  NPU{}: {}\n", i, format_core_list(cores));
  }
  return out;
}

}  // namespace mtrain::device
