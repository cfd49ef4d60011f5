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

const char* collective_library_name(CollectiveLibrary l) {
  switch (l) {
    case CollectiveLibrary::kNone:
      return "none";
    case CollectiveLibrary::kHccl:
      return "hccl";
    case CollectiveLibrary::kNccl:
      return "nccl";
  }
  return "?";
}

int64_t RuntimeMemory::communicator_bytes(int group_size) const {
  if (group_size < 2) return 0;
  switch (library) {
    case CollectiveLibrary::kNone:
      return 0;
    case CollectiveLibrary::kHccl:
      return 2 * hccl_buffsize_bytes;
    case CollectiveLibrary::kNccl:
      return group_size == 2 ? nccl_pair_bytes : nccl_group_bytes;
  }
  return 0;
}

CoreRange even_core_share(int npu, int pool_size, int node_cores) {
  return {npu * node_cores / pool_size, (npu + 1) * node_cores / pool_size - 1};
}

CoreRange DeviceProfile::affinity_of(int npu, int pool_size) const {
  if (static_cast<int>(cpu_affinity.size()) == pool_size && npu < pool_size) return cpu_affinity[npu];
  return even_core_share(npu, pool_size, cpu_cores_per_node);
}

}  // namespace mtrain::device
