// The simulated NPU's clock: how long a kernel or a collective would take on
// the device a DeviceProfile describes. A roofline for kernels and ring
// formulas for collectives; the profiler places the simulated NPU timeline
// with it and a dry run could estimate step time with it.
//
// Constants (estimator-formulas.md §4, "Device profiles"):
// - compute_efficiency 0.95: Calculon's matrix efficiency for large GEMMs
//   (systems/a100_80g.json); the 910B measurement there (BF16 matmul 328 of
//   ~320-354 nominal TFLOPS) supports a value near 1.
// - memory_efficiency 0.4: elementwise passes reach 642 GB/s of the 1.6 TB/s
//   HBM on a 910B (gameofdimension/limulidae, torch.exp).
// - intra_link_efficiency 0.65 (Calculon, NVLink), inter_link_efficiency 0.9
//   (Calculon, InfiniBand).
// - launch_overhead 5 µs per kernel and comm_latency 10 µs per collective
//   step-free call: our assumption (typical host-to-device launch and
//   HCCL/NCCL small-message latency); not from the reference.
#pragma once

#include <cstdint>

#include "device/device.h"

namespace mtrain::device {

struct CostConstants {
  double compute_efficiency = 0.95;
  double memory_efficiency = 0.4;
  double intra_link_efficiency = 0.65;
  double inter_link_efficiency = 0.9;
  double launch_overhead_s = 5e-6;
  double comm_latency_s = 10e-6;
};

// The collective patterns the cost model knows (parallel::CommOp maps onto them).
enum class Collective { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kPointToPoint, kBarrier };

class CostModel {
 public:
  explicit CostModel(const DeviceProfile& p, CostConstants c = {}) : p_(p), c_(c) {}

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
