// Which simulated NPU a rank owns. Each node has a pool of the device
// profile's `devices_per_node` NPUs (MTRAIN_DEVICES_PER_NODE overrides it);
// ASCEND_RT_VISIBLE_DEVICES (CUDA_VISIBLE_DEVICES as an alias) narrows it to a
// comma list of pool indices, and local rank N binds to the N-th visible one,
// as torch_npu does. Every problem is a DistributedError (exit 8) naming the
// variable, its value and the counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device/cpu_affinity.h"
#include "mtrain/launch/launch_env.h"

namespace mtrain::launch {

struct VisibleDevices {
  std::vector<int> ids;  // pool indices, in the order given
  std::string variable;  // "ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", or "" (whole pool)
  std::string value;     // the variable's text
  int pool_size = 0;

  std::string describe() const;  // "npu:0,2,3 (ASCEND_RT_VISIBLE_DEVICES=0,2,3)" / "npu:0-7 (all 8)"
};

// Where a rank sits in its node's simulated pool.
struct DevicePlacement {
  std::string profile;    // device profile name, e.g. "Ascend910B3"
  int64_t hbm_bytes = 0;  // per device
  VisibleDevices visible;
  int device = 0;                 // this rank's pool index (npu:<device>)
  int affinity_mode = 0;          // CPU_AFFINITY_CONF's mode
  device::AffinityPlan affinity;  // this rank's cores (npu<device> in CPU_AFFINITY_CONF)
};

// MTRAIN_DEVICES_PER_NODE if set (validated), else `profile_devices_per_node`.
int device_pool_size(const Env& env, int profile_devices_per_node);

// Reads and checks the visibility variables against a pool of `pool_size`:
// entries must be integers in [0, pool_size), without repeats. When both
// variables are set and differ, ASCEND_RT_VISIBLE_DEVICES wins and a warning is added.
VisibleDevices visible_devices(const Env& env, int pool_size, std::vector<std::string>* warnings = nullptr);

// The device of `local_rank` among `local_size` ranks on this node. The check
// is on local_size, so every rank of the node fails alike when they do not fit.
int bind_local_rank(const VisibleDevices& visible, int local_rank, int local_size);

}  // namespace mtrain::launch
