// A device profile: what one simulated NPU (or GPU, for comparison) and its
// node look like. configs/devices/<name>.yaml holds one per product, with its
// sources in the file's header comment; lib/config reads the YAML into this
// struct (yaml-cpp stays in lib/config). Everything the cost model, the
// pool, `mtrain npu-smi` and CPU_AFFINITY_CONF need about the hardware lives
// here, not in code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mtrain::device {

// Efficiency and fixed costs of the cost model (cost_model.h). The defaults
// are the reference's (estimator-formulas.md §4); a profile may override each
// under its `cost:` key.
// - compute_efficiency 0.95: Calculon's matrix efficiency for large GEMMs
//   (systems/a100_80g.json); the 910B measurement (BF16 matmul 328 of
//   ~320-354 nominal TFLOPS) supports a value near 1.
// - memory_efficiency 0.4: elementwise passes reach 642 GB/s of the 1.6 TB/s
//   HBM on a 910B (gameofdimension/limulidae, torch.exp).
// - intra_link_efficiency 0.65 (Calculon, NVLink), inter_link_efficiency 0.9
//   (Calculon, InfiniBand).
// - launch_overhead 5 us per kernel and comm_latency 10 us per collective:
//   our assumption (typical host-to-device launch and HCCL/NCCL small-message
//   latency); not from the reference.
struct CostConstants {
  double compute_efficiency = 0.95;
  double memory_efficiency = 0.4;
  double intra_link_efficiency = 0.65;
  double inter_link_efficiency = 0.9;
  double launch_overhead_s = 5e-6;
  double comm_latency_s = 10e-6;
};

// How the devices of one node are wired: which collective algorithm the
// cost model assumes inside a node, and what intra_node_link_gbps measures
// (cost_model.h has the formulas).
enum class IntraNodeTopology {
  kRing,      // one link per device used by a ring (the conservative model; a profile without the key)
  kFullMesh,  // a direct link between every pair (910B HCCS); intra_node_link_gbps is per link
  kSwitch,    // every device on a switch (NVSwitch); intra_node_link_gbps is the device's own bandwidth
};
// "ring", "full_mesh", "switch".
const char* topology_name(IntraNodeTopology t);

// An inclusive range of CPU core ids, as `npu-smi info -t topo` prints it ("144-167").
struct CoreRange {
  int first = 0;
  int last = 0;
  int count() const { return last - first + 1; }
  bool operator==(const CoreRange&) const = default;
};

// torch_npu's default CPU_AFFINITY_CONF range: a node's `node_cores` split
// evenly over its `pool_size` devices (160 cores, 8 NPUs: npu1 -> 20-39).
CoreRange even_core_share(int npu, int pool_size, int node_cores);

struct DeviceProfile {
  std::string name = "Ascend910B3";
  std::string chip_name = "910B3";   // npu-smi's Name column
  int64_t hbm_bytes = 64LL << 30;    // 64 GiB
  double peak_tflops_16bit = 294.9;  // cube unit, bf16/fp16
  double peak_tflops_fp32 = 73.7;
  double hbm_gbps = 1600.0;  // HBM bandwidth, GB/s
  // GB/s per direction: one HCCS link (half the 56 GB/s bidirectional per NPU pair) of a full mesh.
  double intra_node_link_gbps = 28.0;
  IntraNodeTopology intra_node_topology = IntraNodeTopology::kFullMesh;
  double inter_node_link_gbps = 25.0;    // RoCE per NPU per direction
  std::string intra_node_link = "HCCS";  // the link kind `npu-smi info -t topo` shows between two devices of a node
  int devices_per_node = 8;
  int64_t allocator_block_bytes = 2LL << 20;  // reserved memory grows in these blocks
  // The host CPU of one node: its core count and, per device, the cores of
  // the device's NUMA node (`npu-smi info -t topo`'s CPU Affinity column).
  // Empty affinity: the cores split evenly over the devices.
  int cpu_cores_per_node = 192;
  std::vector<CoreRange> cpu_affinity;
  CostConstants cost;

  // Device `npu`'s affinity range on the profile's node, for a pool of
  // `pool_size` devices: its cpu_affinity entry, else (no list, or a pool
  // size other than the list's) an even split of the node's cores.
  CoreRange affinity_of(int npu, int pool_size) const;
};

}  // namespace mtrain::device
