// The cost model's formulas against hand-computed numbers (Ascend 910B3
// profile: 294.9 / 73.7 TFLOPS, 1600 GB/s HBM, 28 GB/s per HCCS link and
// direction in a full mesh, 25 GB/s RoCE), and the collective algorithms of
// each node topology against their formulas, from the shipped profiles' numbers.
#include <gtest/gtest.h>

#include "config/profiles.h"
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
  // all_reduce 28 MB over 2 ranks intra (one link): 2·1/2·28e6 / (28e9·0.65) + 10 µs = 1538.46 + 10 µs.
  EXPECT_NEAR(m.comm_seconds(Collective::kAllReduce, 28e6, 2, false), 1e-3 / 0.65 + 10e-6, 1e-12);
}

TEST(CostModel, RingFormulas) {
  DeviceProfile ring;
  ring.intra_node_topology = IntraNodeTopology::kRing;
  ring.intra_node_link_gbps = 56;
  const CostModel m(ring, round_constants());
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

// A shipped profile's collective times against the formulas of its topology,
// with the profile's own link bandwidth, efficiency and latency.
struct Topo {
  double bw;  // bytes/s per direction, efficiency applied
  double latency;
};
Topo topo_of(const DeviceProfile& p, bool inter) {
  return {(inter ? p.inter_node_link_gbps * p.cost.inter_link_efficiency
                 : p.intra_node_link_gbps * p.cost.intra_link_efficiency) *
              1e9,
          p.cost.comm_latency_s};
}

TEST(CostModel, FullMeshSpreadsCollectivesOverTheLinksToEveryPeer) {
  const DeviceProfile p = config::load_device_profile("Ascend910B3");
  ASSERT_EQ(p.intra_node_topology, IntraNodeTopology::kFullMesh);
  const CostModel m(p);
  const Topo t = topo_of(p, false);
  const double S = 64e6;
  for (int n : {2, 4, 8}) {
    // Each rank's n-1 chunks of S/n go out over n-1 links at once: S/n per link.
    const double gather = S / n / t.bw;
    EXPECT_NEAR(m.comm_seconds(Collective::kAllGather, S, n, false), gather + t.latency, 1e-12) << n;
    EXPECT_NEAR(m.comm_seconds(Collective::kReduceScatter, S, n, false), gather + t.latency, 1e-12) << n;
    EXPECT_NEAR(m.comm_seconds(Collective::kAllReduce, S, n, false), 2 * gather + t.latency, 1e-12) << n;
  }
  // Point-to-point and broadcast use one link.
  EXPECT_NEAR(m.comm_seconds(Collective::kPointToPoint, S, 2, false), S / t.bw + t.latency, 1e-12);
  EXPECT_NEAR(m.comm_seconds(Collective::kBroadcast, S, 8, false), S / t.bw + t.latency, 1e-12);
  // A group spanning nodes is a ring over RoCE.
  const Topo roce = topo_of(p, true);
  EXPECT_NEAR(m.comm_seconds(Collective::kAllReduce, S, 16, true), 2.0 * 15 / 16 * S / roce.bw + roce.latency, 1e-12);
  EXPECT_NEAR(m.comm_seconds(Collective::kAllGather, S, 4, true), 3.0 / 4 * S / roce.bw + roce.latency, 1e-12);
}

TEST(CostModel, SwitchRunsRingsAtEachGpusBandwidth) {
  for (const char* name : {"A100-SXM-80GB", "H100-SXM-80GB"}) {
    const DeviceProfile p = config::load_device_profile(name);
    ASSERT_EQ(p.intra_node_topology, IntraNodeTopology::kSwitch) << name;
    const CostModel m(p);
    const Topo t = topo_of(p, false), ib = topo_of(p, true);
    const double S = 64e6;
    for (int n : {2, 8}) {
      EXPECT_NEAR(m.comm_seconds(Collective::kAllReduce, S, n, false), 2.0 * (n - 1) / n * S / t.bw + t.latency, 1e-12);
      EXPECT_NEAR(m.comm_seconds(Collective::kAllGather, S, n, false), (n - 1.0) / n * S / t.bw + t.latency, 1e-12);
      EXPECT_NEAR(m.comm_seconds(Collective::kReduceScatter, S, n, true), (n - 1.0) / n * S / ib.bw + ib.latency,
                  1e-12);
    }
  }
}

TEST(CostModel, FullMeshBeatsARingOverOneLinkByTheLinkCount) {
  // The same 8-NPU all-reduce: a full mesh is n-1 = 7 times faster than a ring on one of its links.
  DeviceProfile mesh, ring;
  ring.intra_node_topology = IntraNodeTopology::kRing;
  const CostModel a(mesh, round_constants()), b(ring, round_constants());
  EXPECT_NEAR(
      b.comm_seconds(Collective::kAllReduce, 1e9, 8, false) / a.comm_seconds(Collective::kAllReduce, 1e9, 8, false),
      7.0, 1e-12);
}

// all_to_all(-v): S = bytes sent + bytes received (CommEvent bytes +
// recv_bytes); D = S/2 per direction, D/n to each peer. The shipped
// profiles' numbers written out: 910B3 HCCS 28 GB/s · 0.65 = 18.2e9 B/s per
// link, RoCE 25 GB/s · 0.9 = 22.5e9 B/s; A100 NVSwitch 300 GB/s · 0.65 =
// 195e9 B/s per GPU; latency 10 µs everywhere.
TEST(CostModel, AllToAllOnEachTopology) {
  const double D = 64e6, S = 2 * D, latency = 10e-6;
  const CostModel mesh(config::load_device_profile("Ascend910B3"));
  // Full mesh: 8 ranks each send D/8 to 7 peers over 7 links at once:
  // 8e6 / 18.2e9 = 439.56 µs.
  EXPECT_NEAR(mesh.comm_seconds(Collective::kAllToAll, S, 8, false), 8e6 / 18.2e9 + latency, 1e-12);
  EXPECT_NEAR(mesh.comm_seconds(Collective::kAllToAll, S, 2, false), 32e6 / 18.2e9 + latency, 1e-12);
  // Spanning nodes (16 ranks, two nodes): 15/16 of D through the NIC: 60e6 / 22.5e9 = 2.667 ms.
  EXPECT_NEAR(mesh.comm_seconds(Collective::kAllToAll, S, 16, true), 60e6 / 22.5e9 + latency, 1e-12);
  // Switch: 7/8 of D through the GPU's own port: 56e6 / 195e9 = 287.18 µs.
  const CostModel nvswitch(config::load_device_profile("A100-SXM-80GB"));
  EXPECT_NEAR(nvswitch.comm_seconds(Collective::kAllToAll, S, 8, false), 56e6 / 195e9 + latency, 1e-12);
  EXPECT_NEAR(nvswitch.comm_seconds(Collective::kAllToAll, S, 4, true), 48e6 / 22.5e9 + latency, 1e-12);
  // Ring (one link a device, 56 GB/s, bare formulas): the D/4 for the peer d
  // hops on crosses d links; each link carries (1 + 2 + 3) · D/4 = 1.5 D:
  // 1.5 · 64e6 / 56e9 = 1.714 ms. Over 2 ranks the ring is one link: D/2.
  DeviceProfile ring;
  ring.intra_node_topology = IntraNodeTopology::kRing;
  ring.intra_node_link_gbps = 56;
  const CostModel r(ring, round_constants());
  EXPECT_NEAR(r.comm_seconds(Collective::kAllToAll, S, 4, false), 96e6 / 56e9, 1e-12);
  EXPECT_NEAR(r.comm_seconds(Collective::kAllToAll, S, 2, false), 32e6 / 56e9, 1e-12);
  // A group of one keeps its block.
  EXPECT_EQ(mesh.comm_seconds(Collective::kAllToAll, S, 1, false), 0.0);
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
