// The simulated NPU's clock: how long a kernel or a collective would take on
// the device a DeviceProfile describes. A roofline for kernels and ring
// formulas for collectives; the profiler places the simulated NPU timeline
// with it and a dry run could estimate step time with it.
//
// The efficiencies and fixed costs come from the profile (profile.h,
// CostConstants: defaults and their sources; a profile's `cost:` key).
#pragma once

#include <cstdint>

#include "device/device.h"

namespace mtrain::device {

// The collective patterns the cost model knows (parallel::CommOp maps onto them).
enum class Collective { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kPointToPoint, kBarrier };

class CostModel {
 public:
  explicit CostModel(const DeviceProfile& p) : p_(p), c_(p.cost) {}
  CostModel(const DeviceProfile& p, CostConstants c) : p_(p), c_(c) {}

  // Roofline: max(flops / (peak · compute_eff), bytes / (hbm · memory_eff)) +
  // launch overhead. Peak by dtype: the cube unit's 16-bit rate for bf16/fp16,
  // the fp32 rate otherwise.
  double kernel_seconds(double flops, double bytes, bool sixteen_bit) const;

  // Ring algorithms over `group_size` ranks; `bytes` is CommEvent's payload
  // (all_reduce / broadcast: the buffer; all_gather / reduce_scatter: the full
  // unsharded buffer; point-to-point: the message):
  //   all_reduce                  2(n-1)/n · bytes / bw
  //   all_gather, reduce_scatter   (n-1)/n · bytes / bw
  //   broadcast (pipelined ring)          bytes / bw
  //   send / recv                         bytes / bw
  //   barrier                     latency only
  // plus comm_latency; bw = the intra-node link (HCCS) or, when the group
  // spans nodes, the inter-node link (RoCE), times its efficiency. A group of
  // one costs nothing (except point-to-point, which always has a peer).
  double comm_seconds(Collective op, double bytes, int group_size, bool inter_node) const;

  const CostConstants& constants() const { return c_; }

 private:
  DeviceProfile p_;
  CostConstants c_;
};

}  // namespace mtrain::device
