// `mtrain devices`: the simulated NPU pool of each node and, under a launch,
// which rank owns which device -- what `npu-smi info` shows on an Ascend host.
// Rank 0 gathers one record per rank (MPI_Gather) and prints them in rank order:
//
//   mtrain devices: profile Ascend910B3, 64 GiB HBM per device, 8 devices per node
//   node 0 (host a01): visible npu:0-7 (all 8), 2 local ranks
//   rank 0/2 node 0 local 0 -> npu:0 (pid 4242, threads 1)
//   rank 1/2 node 0 local 1 -> npu:1 (pid 4243, threads 1)
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "mtrain/launch/launch_devices.h"
#include "mtrain/launch/launch_env.h"
#include "mtrain/launch/rendezvous.h"

namespace mtrain::launch {

struct DevicesOptions {
  std::string device_profile;  // "" = the training default (Ascend910B3)
  double hold_seconds = 0;     // keep the ranks alive this long after printing (to inspect them)
  bool help = false;
};

// `--device_profile NAME|FILE` (also --device-profile, =VALUE), `--hold SECONDS`, `-h/--help`.
// Throws UsageError (exit 2) for anything else.
DevicesOptions parse_devices_args(const std::vector<std::string>& args);
std::string devices_help();

// Loads the profile (lib/config: configs/devices/<name>.yaml), applies
// MTRAIN_DEVICES_PER_NODE and the visibility variables, binds this local rank
// and plans its CPU_AFFINITY_CONF cores. Throws ConfigError for an unknown
// profile or a bad CPU_AFFINITY_CONF, DistributedError for binding problems.
DevicePlacement place_device(const std::string& device_profile, const Env& env, const WorldInfo& world,
                             std::vector<std::string>* warnings);

// Prints on world rank 0 (gathering from every rank when `comm` is not MPI_COMM_NULL); returns 0.
int run_devices_command(const DevicesOptions& options, const DevicePlacement& placement, const WorldInfo& world,
                        MPI_Comm comm);

}  // namespace mtrain::launch
