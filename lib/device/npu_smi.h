// `mtrain npu-smi info` and `npu-smi info -t topo`: the node's simulated pool
// in the layout Ascend users know from the driver's npu-smi tool (our own
// formatter). What a simulated device does not have is printed as such:
// Power(W) and Temp(C) are "NA", AICore(%) and Hugepages-Usage are 0,
// Memory-Usage (the chip's DDR, not HBM) is 0 / 0 and the Bus-Id is synthetic
// (0000:<npu+1>:00.0). HBM-Usage is live: the sum of the reserved bytes of the
// ranks on that device (npu_status.h), over the profile's capacity.
#pragma once

#include <string>
#include <vector>

#include "device/npu_status.h"
#include "device/profile.h"

namespace mtrain::device {

// The chip table and the process table for one node's pool of `pool_size`
// devices of `profile`; `procs` are that node's ranks (read_npu_status).
std::string format_npu_smi_info(const DeviceProfile& profile, int pool_size, int node,
                                const std::vector<NpuProcessStatus>& procs);

// The NPU x NPU link matrix with each device's CPU affinity on the profile's
// node, then what those ranges become on this machine's `machine_cores`.
std::string format_npu_smi_topo(const DeviceProfile& profile, int pool_size, const std::vector<int>& machine_cores);

}  // namespace mtrain::device
