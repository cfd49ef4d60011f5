#include "device/profile.h"

namespace mtrain::device {

const char* topology_name(IntraNodeTopology t) {
  switch (t) {
    case IntraNodeTopology::kRing:
      return "ring";
    case IntraNodeTopology::kFullMesh:
      return "full_mesh";
    case IntraNodeTopology::kSwitch:
      return "switch";
  }
  return "?";
}

CoreRange even_core_share(int npu, int pool_size, int node_cores) {
  return {npu * node_cores / pool_size, (npu + 1) * node_cores / pool_size - 1};
}

CoreRange DeviceProfile::affinity_of(int npu, int pool_size) const {
  if (static_cast<int>(cpu_affinity.size()) == pool_size && npu < pool_size) return cpu_affinity[npu];
  return even_core_share(npu, pool_size, cpu_cores_per_node);
}

}  // namespace mtrain::device
