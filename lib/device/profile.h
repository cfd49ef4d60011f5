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

// Efficiency and fixed costs of the cost model (cost_model.h). These
// defaults serve a profile without a `cost:` key (tests, tiny_test); the
// shipped profiles set every constant with its source (configs/devices/).
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
//
// The shape model (cost_model.h) adds, each 0 meaning "as compute_efficiency":
// - flash_forward_efficiency / flash_backward_efficiency: a fused attention
//   kernel's share of peak on the blocks it runs (FlashAttention-2/-3's
//   published rates; the profile cites its source).
struct CostConstants {
  double compute_efficiency = 0.95;  // a large GEMM's share of peak (the tile model's ceiling)
  double flash_forward_efficiency = 0;
  double flash_backward_efficiency = 0;
  double memory_efficiency = 0.4;
  double intra_link_efficiency = 0.65;
  double inter_link_efficiency = 0.9;
  double launch_overhead_s = 5e-6;
  double comm_latency_s = 10e-6;  // a collective's base latency (NCCL's Simple protocol)
  // Per algorithm step, inside a node and across nodes (cost_model.h).
  double intra_step_latency_s = 0;
  double inter_step_latency_s = 0;
  // A low-latency protocol (NCCL's LL): its base and step latencies and the
  // share of the bus bandwidth it reaches; 0 share: none.
  double ll_latency_s = 0, ll_intra_step_latency_s = 0, ll_inter_step_latency_s = 0;
  double ll_bandwidth_share = 0;
  // A tree all_reduce across nodes (NCCL's): its share of the bus bandwidth; 0: none.
  double tree_bandwidth_share = 0;
  // The host's time to issue one op (a kernel or a collective) to the
  // device; the device idles when its kernels are shorter (a host-bound
  // step). 0: the host is never the bottleneck.
  double host_dispatch_s = 0;
  // Ascend: host_dispatch_s at TASK_QUEUE_ENABLE 0, 1, 2 (torch_npu's task
  // queue: off; dispatch split over two pipelined stages; the stages
  // rebalanced); the run's level picks host_dispatch_s. Empty: no such knob.
  std::vector<double> host_dispatch_by_task_queue_s;
};

// What a device holds beside the tensors (profile key `runtime:`; a profile
// without it holds nothing beside them). Each part is its own line of the
// dry run's memory report:
// - device_reserved_bytes: HBM the device keeps for itself with no process
//   on it (what npu-smi shows in use on an idle 910B); held from the start.
// - context_bytes: the runtime's context in the process (the CUDA context;
//   CANN's runtime), held from the start.
// - workspace_bytes: GEMM / attention library workspaces outside the caching
//   allocator, held from the start.
// - the collective library's buffers, per communicator the rank uses (a
//   group of two or more ranks it runs a collective or transfer on), held
//   from its first use: HCCL: 2 x HCCL_BUFFSIZE (send and receive; the
//   variable is read from the run's environment, in MB); NCCL: a measured
//   device-memory cost of a 2-rank and of a larger communicator.
// - fragmentation: the caching allocator's reserved memory beyond the
//   allocated at the peak, as a share of the allocated.
// - memory_margin: the share of the capacity `mtrain plan` keeps free (the
//   default of --memory_margin).
enum class CollectiveLibrary { kNone, kHccl, kNccl };
const char* collective_library_name(CollectiveLibrary l);  // "none", "hccl", "nccl"
struct RuntimeMemory {
  int64_t device_reserved_bytes = 0;
  int64_t context_bytes = 0;
  int64_t workspace_bytes = 0;
  CollectiveLibrary library = CollectiveLibrary::kNone;
  int64_t hccl_buffsize_bytes = 200LL << 20;  // HCCL_BUFFSIZE's default, 200 MB
  int64_t nccl_pair_bytes = 0, nccl_group_bytes = 0;
  double fragmentation = 0;
  double memory_margin = 0;
  // The buffers of one communicator of `group_size` ranks (0 below 2).
  int64_t communicator_bytes(int group_size) const;
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

// A measured collective bus bandwidth inside one node (nccl-tests' busbw
// convention: all_reduce moves 2(n-1)/n of the buffer per rank, all_gather and
// reduce_scatter (n-1)/n), for a group of `ranks` devices.
struct BusBandwidth {
  int ranks = 0;
  double gbps = 0;
  bool operator==(const BusBandwidth&) const = default;
};

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
  // The GEMM tile model (cost_model.h): the compute units a GEMM's output
  // tiles are spread over (SMs, AI cores) and the tile (rows x columns of C)
  // one unit computes at a time. 0: no tile model (the plain roofline).
  int compute_units = 0;
  int gemm_tile_m = 0, gemm_tile_n = 0;
  int attention_block = 128;  // a fused attention kernel's query/key block (causal masks skip whole blocks)
  // --tp_comm_overlap: the compute units a pipelined reduce-scatter's
  // communication kernels take from the GEMM beside it (Transformer Engine's
  // userbuffers "pipeline" method with set_sm_margin); 0: none.
  int tp_overlap_units = 0;
  // The compute units the DP collectives' kernels take while they run beside
  // the compute (--overlap_grad_reduce / --overlap_param_gather: NCCL runs
  // one CTA per channel on an SM of its own); the kernels beside them run on
  // the rest. 0: they take none (HCCL's copy engines).
  int dp_comm_units = 0;
  // Measured bus bandwidth inside a node by group size, per collective
  // (empty: the link formulas of cost_model.h). reduce_scatter uses
  // all_gather's (the same traffic, reversed).
  std::vector<BusBandwidth> all_gather_bus_gbps, all_reduce_bus_gbps;
  // The host CPU of one node: its core count and, per device, the cores of
  // the device's NUMA node (`npu-smi info -t topo`'s CPU Affinity column).
  // Empty affinity: the cores split evenly over the devices.
  int cpu_cores_per_node = 192;
  std::vector<CoreRange> cpu_affinity;
  CostConstants cost;
  RuntimeMemory runtime;
  int task_queue_enable = -1;  // the TASK_QUEUE_ENABLE level host_dispatch_s was taken at (-1: none)

  // Device `npu`'s affinity range on the profile's node, for a pool of
  // `pool_size` devices: its cpu_affinity entry, else (no list, or a pool
  // size other than the list's) an even split of the node's cores.
  CoreRange affinity_of(int npu, int pool_size) const;
};

}  // namespace mtrain::device
