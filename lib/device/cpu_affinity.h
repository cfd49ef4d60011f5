// CPU_AFFINITY_CONF, as torch_npu / MindSpeed define it: which host cores
// the threads of the rank that drives NPU n may run on.
//
//   CPU_AFFINITY_CONF=<mode>[,npu<n>:<first>-<last>]...[,npu_affine:<0|1>]
//   mode 0 (or unset)  no binding
//   mode 1             coarse: every thread of the rank on the cores of its NPU's range
//   mode 2             fine: the main thread on the range's first core, compute
//                      (OpenMP/OpenBLAS) thread t on core t of the range, every
//                      other thread on the rest of the range
//   npu<n>:a-b         NPU n's range is cores a..b (ids of this machine)
//   npu_affine:1       NPU n's range is its NUMA affinity from the profile
//                      (`npu-smi info -t topo`), not torch_npu's even split
//
// A range is computed on the profile's node (cpu_cores_per_node cores) and
// mapped onto the cores this process may use when the machine has fewer:
// proportionally while it has at least one core per device, one core per
// device round-robin below that. The plan says so in `note`.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "device/profile.h"

namespace mtrain::device {

struct AffinityConf {
  int mode = 0;  // 0 off, 1 coarse, 2 fine
  bool npu_affine = false;
  std::map<int, CoreRange> ranges;  // npu<n>:a-b overrides, by pool index
};

// Parses the variable's value. Throws ConfigError (exit 3) naming
// CPU_AFFINITY_CONF, its value and the bad item, with the syntax as hint.
AffinityConf parse_cpu_affinity_conf(const std::string& value);

struct AffinityPlan {
  std::vector<int> cores;  // this rank's cores (machine ids, ascending); empty = no binding
  std::string note;        // how the range was obtained (scaled, overridden, ...)
};

// The cores of NPU `npu` (pool index, `pool_size` devices on the node);
// `machine_cores` are the ids this process may use (allowed_cpus()). Throws
// ConfigError when an npu<n>:a-b range holds a core outside machine_cores.
AffinityPlan plan_cpu_affinity(const AffinityConf& conf, const DeviceProfile& profile, int npu, int pool_size,
                               const std::vector<int>& machine_cores);

// A profile range mapped onto `machine_cores` for device `npu` (see above).
std::vector<int> scale_to_machine(CoreRange range, int npu, int pool_size, int node_cores,
                                  const std::vector<int>& machine_cores);

// The CPUs the calling thread may run on (sched_getaffinity), ascending.
std::vector<int> allowed_cpus();
// Binds thread `tid` (0 = the caller) to `cores`; throws Error on failure.
void bind_thread(int tid, const std::vector<int>& cores);
// Ids of this process's threads (/proc/self/task).
std::vector<int> process_threads();
// "0-3,6" (the kernel's Cpus_allowed_list format).
std::string format_core_list(const std::vector<int>& cores);

}  // namespace mtrain::device
