// The cost model's formulas against hand-computed numbers (Ascend 910B3
// profile: 294.9 / 73.7 TFLOPS, 1600 GB/s HBM, 56 GB/s HCCS, 25 GB/s RoCE).
#include <gtest/gtest.h>

#include "device/cost_model.h"

namespace mtrain::device {
namespace {

CostConstants round_constants() {
  CostConstants c;  // efficiencies of 1 and no fixed costs: the bare formulas
  c.compute_efficiency = 1;
  c.memory_efficiency = 1;
  c.intra_link_efficiency = 1;
  c.inter_link_efficiency = 1;
  c.launch_overhead_s = 0;
  c.comm_latency_s = 0;
  return c;
}

TEST(CostModel, GemmIsComputeBoundAtThe16BitPeak) {
  const CostModel m(DeviceProfile{}, round_constants());
  // 4096^3 GEMM: 2·4096^3 = 137.4 GFLOP; bytes 3·4096²·2 = 100.7 MB.
  const double flops = 2.0 * 4096 * 4096 * 4096, bytes = 3.0 * 4096 * 4096 * 2;
  EXPECT_NEAR(m.kernel_seconds(flops, bytes, true), 137438953472.0 / 294.9e12, 1e-12);      // 466.05 µs
  EXPECT_NEAR(m.kernel_seconds(flops, bytes * 2, false), 137438953472.0 / 73.7e12, 1e-12);  // 1864.8 µs
}

TEST(CostModel, ElementwiseIsMemoryBound) {
  const CostModel m(DeviceProfile{}, round_constants());
  // 16 MB read+written, 4 Mflop: 16e6 / 1600e9 = 10 µs.
  EXPECT_NEAR(m.kernel_seconds(4e6, 16e6, true), 10e-6, 1e-15);
}

TEST(CostModel, DefaultConstantsAddEfficiencyAndLaunchOverhead) {
  const CostModel m(DeviceProfile{});
  // 16e6 / (1600e9 · 0.4) + 5 µs = 25 + 5 = 30 µs.
  EXPECT_NEAR(m.kernel_seconds(0, 16e6, true), 30e-6, 1e-12);
  // An empty kernel still costs its launch.
  EXPECT_NEAR(m.kernel_seconds(0, 0, false), 5e-6, 1e-15);
  // all_reduce 56 MB over 2 ranks intra: 2·1/2·56e6 / (56e9·0.65) + 10 µs = 1538.46 + 10 µs.
  EXPECT_NEAR(m.comm_seconds(Collective::kAllReduce, 56e6, 2, false), 1e-3 / 0.65 + 10e-6, 1e-12);
}

TEST(CostModel, RingFormulas) {
  const CostModel m(DeviceProfile{}, round_constants());
  const double B = 56e6;  // 1 ms at 56 GB/s
  // all_reduce over 8: 2·7/8 = 1.75 ms.
  EXPECT_NEAR(m.comm_seconds(Collective::kAllReduce, B, 8, false), 1.75e-3, 1e-12);
  // all_gather / reduce_scatter over 4: 3/4 ms.
  EXPECT_NEAR(m.comm_seconds(Collective::kAllGather, B, 4, false), 0.75e-3, 1e-12);
  EXPECT_NEAR(m.comm_seconds(Collective::kReduceScatter, B, 4, false), 0.75e-3, 1e-12);
  // broadcast and point-to-point: the whole payload once.
  EXPECT_NEAR(m.comm_seconds(Collective::kBroadcast, B, 4, false), 1e-3, 1e-12);
  EXPECT_NEAR(m.comm_seconds(Collective::kPointToPoint, B, 2, false), 1e-3, 1e-12);
  // Inter-node: 25 GB/s; all_reduce of 25 MB over 2 nodes = 2·1/2·1 ms.
  EXPECT_NEAR(m.comm_seconds(Collective::kAllReduce, 25e6, 2, true), 1e-3, 1e-12);
  // A group of one moves nothing; a barrier is latency only.
  EXPECT_EQ(m.comm_seconds(Collective::kAllReduce, B, 1, false), 0.0);
  EXPECT_EQ(m.comm_seconds(Collective::kBarrier, 0, 8, false), 0.0);
}

}  // namespace
TEST(CostModel, ConstantsComeFromTheProfile) {
  DeviceProfile p;  // the 910B3 rates
  p.cost.memory_efficiency = 0.8;
  p.cost.launch_overhead_s = 1e-6;
  p.cost.inter_link_efficiency = 0.5;
  const CostModel m(p);
  // 16e6 / (1600e9 · 0.8) + 1 µs = 12.5 + 1 µs.
  EXPECT_NEAR(m.kernel_seconds(0, 16e6, true), 13.5e-6, 1e-12);
  // broadcast 25 MB between nodes: 25e6 / (25e9 · 0.5) + 10 µs = 2 ms + 10 µs.
  EXPECT_NEAR(m.comm_seconds(Collective::kBroadcast, 25e6, 2, true), 2e-3 + 10e-6, 1e-12);
}

}  // namespace mtrain::device
