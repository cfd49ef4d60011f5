// The simulated NPU's clock: how long a kernel or a collective would take on
// the device a DeviceProfile describes. A roofline for kernels; ring or
// full-mesh formulas for collectives, by the node's topology; the profiler places the simulated NPU timeline
// with it and a dry run could estimate step time with it.
//
// The efficiencies and fixed costs come from the profile (profile.h,
// CostConstants: defaults and their sources; a profile's `cost:` key).
#pragma once

#include <cstdint>

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
  double comm_seconds(Collective op, double bytes, int group_size, bool inter_node) const;

  const CostConstants& constants() const { return c_; }

 private:
  double all_to_all_factor(double n, bool inter_node) const;

  DeviceProfile p_;
  CostConstants c_;
};

}  // namespace mtrain::device
