// The simulated NPU's clock: how long a kernel or a collective would take on
// the device a DeviceProfile describes. A roofline for kernels; ring or
// full-mesh formulas for collectives, by the node's topology; the profiler places the simulated NPU timeline
// with it and a dry run could estimate step time with it.
//
// The efficiencies and fixed costs come from the profile (profile.h,
// CostConstants: defaults and their sources; a profile's `cost:` key).
#pragma once

#include <cstdint>

#include "common/kernel_work.h"
#include "device/device.h"

namespace mtrain::device {

// The collective patterns the cost model knows (parallel::CommOp maps onto them).
enum class Collective { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kPointToPoint, kBarrier, kAllToAll };

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

  // Collective time over `group_size` = n ranks; `bytes` = S is CommEvent's
  // payload (all_reduce / broadcast: the buffer; all_gather / reduce_scatter:
  // the full unsharded buffer; point-to-point: the message; all_to_all: the
  // bytes the rank sends plus those it receives, CommEvent's bytes +
  // recv_bytes, of which each direction of a link carries half). bw is one link's
  // bandwidth per direction times its efficiency; then comm_latency is added.
  //
  // A group that spans nodes, and a node of topology `ring` or `switch`: ring
  // algorithms, bw = the inter-node link (RoCE / IB per device), the intra-
  // node link (ring), or the device's bandwidth to the switch (NVSwitch,
  // NCCL's ring through it):
  //   all_reduce                  2(n-1)/n · S / bw
  //   all_gather, reduce_scatter   (n-1)/n · S / bw
  // A group inside a `full_mesh` node (910B HCCS: a link to each other
  // device; HCCL's mesh algorithms): each rank sends its (n-1) chunks of S/n
  // straight to the n-1 peers, one per link, all links at once:
  //   all_gather, reduce_scatter   (n-1)/n · S / ((n-1) · bw) = S / (n · bw)
  //   all_reduce (reduce_scatter + all_gather)            2 S / (n · bw)
  // Every topology:
  //   broadcast (pipelined ring)          S / bw
  //   send / recv (one link)              S / bw
  //   barrier                     latency only
  // all_to_all(-v), with D = S/2 the rank's buffer in one direction (links are
  // full duplex), of which it keeps 1/n and sends D/n to each of n-1 peers:
  //   full_mesh (a link per pair, all at once)     D / (n · bw)
  //   switch, or a group spanning nodes (the
  //     device's own bandwidth to the fabric)   (n-1)/n · D / bw
  //   ring (no path but the ring: the message to the peer d hops on crosses
  //     d links; n ranks send D/n over d = 1..n-1 hops, the n links share
  //     n · D/n · n(n-1)/2 link-bytes)          (n-1)/2 · D / bw
  // A group of one costs nothing (except point-to-point, which always has a peer).
  //
  // A profile with measured bus bandwidths inside a node (all_gather_bus_gbps,
  // all_reduce_bus_gbps, by group size) prices all_reduce, all_gather and
  // reduce_scatter of a group inside one node from them instead:
  //   all_reduce 2(n-1)/n · S / busbw(n), all_gather / reduce_scatter (n-1)/n · S / busbw(n)
  // busbw(n) linear between the measured group sizes, the nearest one
  // outside them; plus comm_latency.
  double comm_seconds(Collective op, double bytes, int group_size, bool inter_node) const;

  const CostConstants& constants() const { return c_; }

 private:
  double all_to_all_factor(double n, bool inter_node) const;
  double peak_flops(bool sixteen_bit) const;
  double memory_seconds(double bytes) const;
  // max(compute, bytes at memory speed) + launch overhead.
  double roofline(double compute_s, double bytes) const;

  DeviceProfile p_;
  CostConstants c_;
};

}  // namespace mtrain::device
