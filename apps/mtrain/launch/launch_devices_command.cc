#include "mtrain/launch/launch_devices_command.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/errors.h"
#include "config/args.h"
#include "config/profiles.h"
#include "train/cpu_binding.h"

namespace mtrain::launch {

namespace {

// One rank's line, fixed-size so that MPI_Gather moves it as bytes.
struct RankRecord {
  int32_t rank, node, local_rank, local_size, device, pid, threads, pool;
  char host[64];
  char visible[192];
  char cpus[128];  // the rank's cores after CPU_AFFINITY_CONF, "" when it binds nothing
};

void copy_text(char* dst, size_t size, const std::string& src) { std::snprintf(dst, size, "%s", src.c_str()); }

std::string format_bytes(int64_t bytes) {
  constexpr int64_t kGiB = 1LL << 30, kMiB = 1LL << 20;
  if (bytes % kGiB == 0) return fmt::format("{} GiB", bytes / kGiB);
  if (bytes % kMiB == 0) return fmt::format("{} MiB", bytes / kMiB);
  return fmt::format("{} bytes", bytes);
}

std::string flag_value(const std::vector<std::string>& args, size_t& i, const std::string& name) {
  const std::string& a = args[i];
  const size_t eq = a.find('=');
  if (eq != std::string::npos) return a.substr(eq + 1);
  if (i + 1 >= args.size()) throw UsageError(fmt::format("{} needs a value", name), "`mtrain devices --help`");
  return args[++i];
}

RankRecord my_record(const DevicePlacement& p, const WorldInfo& w) {
  RankRecord r{};
  r.rank = w.rank;
  r.node = w.node;
  r.local_rank = w.local_rank;
  r.local_size = w.local_size;
  r.device = p.device;
  r.pid = static_cast<int32_t>(getpid());
  // What a training run would use, and the binding it would make.
  r.threads = train::configure_threads(config::Args{}, w.local_size, static_cast<int>(p.affinity.cores.size()));
  if (!train::bind_rank_threads(p.affinity_mode, p.affinity, r.threads).empty())
    copy_text(r.cpus, sizeof(r.cpus), device::format_core_list(device::allowed_cpus()));
  r.pool = p.visible.pool_size;
  char host[64] = {};
  gethostname(host, sizeof(host) - 1);
  copy_text(r.host, sizeof(r.host), host);
  copy_text(r.visible, sizeof(r.visible), p.visible.describe());
  return r;
}

void print_report(const DevicePlacement& p, const std::vector<RankRecord>& records, int world_size) {
  fmt::print("mtrain devices: profile {}, {} HBM per device, {} devices per node\n", p.profile,
             format_bytes(p.hbm_bytes), p.visible.pool_size);
  int last_node = -1;
  for (const auto& r : records) {  // in rank order, so each node's local rank 0 comes first
    if (r.node != last_node && r.local_rank == 0) {
      fmt::print("node {} (host {}): visible {}, {} local rank{}\n", r.node, r.host, r.visible, r.local_size,
                 r.local_size == 1 ? "" : "s");
      last_node = r.node;
    }
  }
  for (const auto& r : records) {
    fmt::print("rank {}/{} node {} local {} -> npu:{} (pid {}, threads {}{}{})\n", r.rank, world_size, r.node,
               r.local_rank, r.device, r.pid, r.threads, r.cpus[0] != '\0' ? ", cpus " : "", r.cpus);
  }
  std::fflush(stdout);
}

}  // namespace

DevicesOptions parse_devices_args(const std::vector<std::string>& args) {
  DevicesOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const std::string name = a.substr(0, a.find('='));
    if (a == "-h" || a == "--help") {
      o.help = true;
    } else if (name == "--device_profile" || name == "--device-profile") {
      o.device_profile = flag_value(args, i, name);
    } else if (name == "--hold") {
      const std::string v = flag_value(args, i, name);
      char* end = nullptr;
      o.hold_seconds = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(o.hold_seconds >= 0) || o.hold_seconds > 86400) {
        throw UsageError(fmt::format("--hold {}: not a number of seconds", v), "e.g. --hold 30");
      }
    } else {
      throw UsageError(fmt::format("unknown argument '{}' for mtrain devices", a),
                       "mtrain devices [--device_profile NAME] [--hold SECONDS]");
    }
  }
  return o;
}

std::string devices_help() {
  return "usage: mtrain devices [--device_profile NAME|FILE] [--hold SECONDS]\n\n"
         "Shows the simulated NPU pool of each node (profile, HBM, visible devices) and, when\n"
         "started by a launch (NPROC_PER_NODE=N, NNODES=..., or mpirun -np N), one line per rank:\n"
         "  rank R/W node N local L -> npu:D (pid P, threads T[, cpus C])\n"
         "(cpus: the main thread's cores after CPU_AFFINITY_CONF, when it is set)\n\n"
         "  --device_profile  configs/devices/<NAME>.yaml or a YAML file (default Ascend910B3)\n"
         "  --hold SECONDS    keep the ranks alive after printing (to inspect them with ps/ss)\n\n"
         "Environment: ASCEND_RT_VISIBLE_DEVICES (alias CUDA_VISIBLE_DEVICES) limits the pool;\n"
         "MTRAIN_DEVICES_PER_NODE overrides the profile's devices_per_node. See docs/LAUNCH.md.\n";
}

DevicePlacement place_device(const std::string& device_profile, const Env& env, const WorldInfo& world,
                             std::vector<std::string>* warnings) {
  const std::string name = device_profile.empty() ? config::Args{}.device_profile : device_profile;
  config::DeviceProfileSpec spec;
  try {
    spec = config::load_device_profile(name);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("--device_profile {}: {}", name, e.what()), e.hint());
  }
  DevicePlacement p;
  p.profile = spec.name;
  p.hbm_bytes = spec.hbm_bytes;
  p.visible = visible_devices(env, device_pool_size(env, spec.devices_per_node), warnings);
  p.device = bind_local_rank(p.visible, world.local_rank, world.local_size);
  // Checked here, before any work, so a malformed value stops every rank alike (exit 3).
  const device::AffinityConf conf = device::parse_cpu_affinity_conf(env.get("CPU_AFFINITY_CONF").value_or(""));
  p.affinity_mode = conf.mode;
  p.affinity = device::plan_cpu_affinity(conf, spec, p.device, p.visible.pool_size, device::allowed_cpus());
  return p;
}

int run_devices_command(const DevicesOptions& options, const DevicePlacement& placement, const WorldInfo& world,
                        MPI_Comm comm) {
  const RankRecord mine = my_record(placement, world);
  std::vector<RankRecord> records(world.rank == 0 ? world.size : 1);
  if (comm != MPI_COMM_NULL) {
    MPI_Gather(&mine, sizeof(RankRecord), MPI_BYTE, records.data(), sizeof(RankRecord), MPI_BYTE, 0, comm);
  } else {
    records[0] = mine;
  }
  if (world.rank == 0) print_report(placement, records, world.size);
  if (options.hold_seconds > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(options.hold_seconds));
  }
  return 0;
}

}  // namespace mtrain::launch
