// The simulated NPU's clock: how long a kernel or a collective would take on
// the device a DeviceProfile describes. A roofline for kernels; ring or
// full-mesh formulas for collectives, by the node's topology; the profiler places the simulated NPU timeline
// with it and a dry run could estimate step time with it.
//
// The efficiencies and fixed costs come from the profile (profile.h,
// CostConstants: defaults and their sources; a profile's `cost:` key).
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/kernel_work.h"
#include "device/device.h"

namespace mtrain::device {

// The collective patterns the cost model knows (parallel::CommOp maps onto them).
enum class Collective { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kPointToPoint, kBarrier, kAllToAll };

// A collective's group: its ranks and the nodes they span (1: one node).
struct CommGroup {
  int size = 1;
  int nodes = 1;
  // Ranks of the group on each node (spread evenly).
  int per_node() const { return std::max(1, (size + std::max(1, nodes) - 1) / std::max(1, nodes)); }
};

class CostModel {
 public:
  explicit CostModel(const DeviceProfile& p) : p_(p), c_(p.cost) {}
  CostModel(const DeviceProfile& p, CostConstants c) : p_(p), c_(c) {}

  // Roofline: max(flops / (peak · compute_eff), bytes / (hbm · memory_eff)) +
  // launch overhead. Peak by dtype: the cube unit's 16-bit rate for bf16/fp16,
  // the fp32 rate otherwise.
  double kernel_seconds(double flops, double bytes, bool sixteen_bit) const;

  // A kernel priced by what it does (common/kernel_work.h):
  // - kMemory: the roofline above (bytes at the measured bandwidth share).
  // - kGemm, with the profile's tile model (compute_units, gemm_tile_m x
  //   gemm_tile_n): C's tiles, ceil(m/tm)·ceil(n/tn) per GEMM times `batch`,
  //   run in waves of compute_units; each wave costs one full tile's
  //   2·tm·tn·k flops at the unit's share of peak x compute_efficiency. So
  //   a GEMM that fills its last tile or wave partly pays for all of it
  //   (tile and wave quantization, NVIDIA's "Matrix Multiplication
  //   Background" guide). A dimension below the tile runs a tile cut to it,
  //   rounded up to 64 (cuBLAS's smallest tile, 64 x 64). Then the roofline
  //   against HBM for skinny shapes:
  //   max(compute, bytes / bandwidth) + launch overhead.
  // - kFlashForward / kFlashBackward: the blocks of attention_block x
  //   attention_block that run (under a causal mask, those on or below the
  //   diagonal: nb(nb+1)/2 of nb² for a square block), at the peak x
  //   flash_{forward,backward}_efficiency, against the roofline.
  // - kUnfusedAttention: its GEMMs by the tile model (QK^T: T x T x D per
  //   head, then the T x D x T product(s)), then its passes over the score
  //   tensor at memory speed, one after the other (separate kernels).
  double kernel_seconds(const KernelWork& w, bool sixteen_bit) const;

  // The GEMM part of kernel_seconds(kGemm) without launch overhead or roofline.
  double gemm_compute_seconds(int64_t m, int64_t n, int64_t k, int64_t batch, bool sixteen_bit) const;
  // Share of a causal attention's full blocks that run (1 when not causal).
  double causal_block_share(int64_t tq, int64_t tk) const;

  // Collective time over a group of n = g.size ranks on N = g.nodes nodes,
  // p = ceil(n / N) of them on each node; `bytes` = S is CommEvent's payload
  // (all_reduce / broadcast: the buffer; all_gather / reduce_scatter: the
  // full unsharded buffer; point-to-point: the message; all_to_all: the
  // bytes the rank sends plus those it receives, CommEvent's bytes +
  // recv_bytes, of which each direction of a link carries half). Time =
  // latency + transfer, the transfer at the group's bus bandwidth B:
  //   all_reduce 2(n-1)/n · S / B, all_gather and reduce_scatter (n-1)/n · S / B.
  //
  // B inside one node (N = 1), by the node's topology, with l one link's
  // bandwidth per direction times intra_link_efficiency:
  //   ring (one link per device)  and  switch (NVSwitch: l is the device's
  //     own bandwidth to the switch; NCCL's ring through it):      B = l
  //   full_mesh (910B HCCS: a link to each other device; HCCL's mesh
  //     algorithms send every chunk straight to its peer, all links at
  //     once):                                                    B = (n-1) · l
  //   a profile with measured bus bandwidths (all_gather_bus_gbps,
  //     all_reduce_bus_gbps by group size, nccl-tests' busbw): B = busbw(n),
  //     linear between the measured sizes, the nearest one outside them.
  // A group spanning nodes (N > 1) runs one ring through the nodes, its
  // intra-node hops at the node's B for p ranks and its inter-node hops
  // over the p members' own NICs (w each: inter_node_link_gbps x
  // inter_link_efficiency), all at once:  B = min(B_node(p), p · w)  (B = w
  // at p = 1). NCCL measures exactly this on DGX A100: 192 GB/s all_reduce
  // busbw = 8 NICs x 24 GB/s (NVIDIA/nccl#812); HCCL's pipeline algorithm
  // runs the intra-node mesh and the inter-node ring concurrently the same way.
  //
  // Every topology:
  //   broadcast (pipelined ring)  S / l (S / w across nodes)
  //   send / recv (one link)      S / l (S / w across nodes)
  //   barrier                     latency only
  // all_to_all(-v), with D = S/2 the rank's buffer in one direction (links are
  // full duplex), of which it keeps 1/n and sends D/n to each of n-1 peers:
  //   full_mesh (a link per pair, all at once)     D / (n · l)
  //   switch                                       (n-1)/n · D / l
  //   ring (no path but the ring: the message to the peer d hops on crosses
  //     d links; n ranks send D/n over d = 1..n-1 hops, the n links share
  //     n · D/n · n(n-1)/2 link-bytes)              (n-1)/2 · D / l
  //   across nodes: the off-node part through the rank's own NIC (an
  //     all-to-all cannot aggregate a node's NICs, NVIDIA/nccl-tests#267),
  //     beside the on-node part among its p:
  //       max((n-p)/n · D / w, the on-node formula for the p with D·p/n)
  // A group of one costs nothing (except point-to-point, which always has a peer).
  //
  // Latency, NCCL's model (src/graph/tuning.cc): a base per collective plus
  // one per algorithm step, an inter-node step costing more than one inside
  // a node. Ring steps: all_reduce 2(n-1) of which 2(N-1) cross nodes,
  // all_gather / reduce_scatter n-1 (N-1), broadcast n-1 (N-1); a full mesh
  // inside a node takes one step per phase (HCCL's Mesh: all_gather and
  // reduce_scatter 1, all_reduce 2); send / recv and all_to_all one step.
  // Where the profile has them, cheaper choices are priced too and the
  // fastest taken, as NCCL picks among its algorithms and protocols:
  //   - the low-latency protocol (NCCL's LL): its own base and step
  //     latencies, the transfer at ll_bandwidth_share of B;
  //   - a tree for an all_reduce across nodes (NCCL's double binary tree):
  //     2((p-1) intra + ceil(log2 N) inter) steps, transfer 2 S / (B ·
  //     tree_bandwidth_share) (each rank sends the buffer up and down once).
  double comm_seconds(Collective op, double bytes, CommGroup g) const;

  const CostConstants& constants() const { return c_; }

 private:
  // The seconds of moving `bytes` (bandwidth only), the bus bandwidth B above.
  double transfer_seconds(Collective op, double bytes, const CommGroup& g) const;
  double bus_bandwidth(Collective op, int ranks) const;  // B inside one node
  // Latency of op over g: base + steps (intra, inter) at the given per-step costs.
  double latency_seconds(Collective op, const CommGroup& g, double base, double intra, double inter) const;
  double peak_flops(bool sixteen_bit) const;
  double memory_seconds(double bytes) const;
  // max(compute, bytes at memory speed) + launch overhead.
  double roofline(double compute_s, double bytes) const;

  DeviceProfile p_;
  CostConstants c_;
};

}  // namespace mtrain::device
