// `mtrain npu-smi info [-t topo]`: this node's simulated pool as Ascend's
// npu-smi prints it (device/npu_smi.h), with the HBM usage and process of
// every mtrain rank running on this machine (device/npu_status.h). One
// process, no launch, no MPI.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "mtrain/launch/launch_env.h"

namespace mtrain::launch {

struct NpuSmiOptions {
  bool topo = false;           // -t topo
  std::string device_profile;  // "" = the training default (Ascend910B3)
  bool help = false;
};

// `info`, then `-t topo` (or `-t=topo`), `--device_profile NAME|FILE`, `-h`.
// Throws UsageError (exit 2) for anything else, naming what npu-smi has and mtrain does not simulate.
NpuSmiOptions parse_npu_smi_args(const std::vector<std::string>& args);
std::string npu_smi_help();

int run_npu_smi_command(const NpuSmiOptions& options, const Env& env, std::ostream& out);

}  // namespace mtrain::launch
