// The cost model's formulas against hand-computed numbers (Ascend 910B3
// profile: 294.9 / 73.7 TFLOPS, 1600 GB/s HBM, 28 GB/s per HCCS link and
// direction in a full mesh, 25 GB/s RoCE), and the collective algorithms of
// each node topology against their formulas, from the shipped profiles' numbers.
#include <gtest/gtest.h>

#include <cmath>

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
  EXPECT_NEAR(m.comm_seconds(Collective::kAllReduce, 28e6, {2, 1}), 1e-3 / 0.65 + 10e-6, 1e-12);
}

TEST(CostModel, RingFormulas) {
  DeviceProfile ring;
  ring.intra_node_topology = IntraNodeTopology::kRing;
  ring.intra_node_link_gbps = 56;
  const CostModel m(ring, round_constants());
  const double B = 56e6;  // 1 ms at 56 GB/s
  // all_reduce over 8: 2·7/8 = 1.75 ms.
  EXPECT_NEAR(m.comm_seconds(Collective::kAllReduce, B, {8, 1}), 1.75e-3, 1e-12);
  // all_gather / reduce_scatter over 4: 3/4 ms.
  EXPECT_NEAR(m.comm_seconds(Collective::kAllGather, B, {4, 1}), 0.75e-3, 1e-12);
  EXPECT_NEAR(m.comm_seconds(Collective::kReduceScatter, B, {4, 1}), 0.75e-3, 1e-12);
  // broadcast and point-to-point: the whole payload once.
  EXPECT_NEAR(m.comm_seconds(Collective::kBroadcast, B, {4, 1}), 1e-3, 1e-12);
  EXPECT_NEAR(m.comm_seconds(Collective::kPointToPoint, B, {2, 1}), 1e-3, 1e-12);
  // Inter-node: 25 GB/s; all_reduce of 25 MB over 2 nodes = 2·1/2·1 ms.
  EXPECT_NEAR(m.comm_seconds(Collective::kAllReduce, 25e6, {2, 2}), 1e-3, 1e-12);
  // A group of one moves nothing; a barrier is latency only.
  EXPECT_EQ(m.comm_seconds(Collective::kAllReduce, B, {1, 1}), 0.0);
  EXPECT_EQ(m.comm_seconds(Collective::kBarrier, 0, {8, 1}), 0.0);
}

// A shipped profile's collective times against the formulas of its topology,
// with the profile's own link bandwidth, efficiency and latency.
struct Topo {
  double bw;  // bytes/s per direction, efficiency applied
  double latency;
};
// The profile with only its base latency per collective: these tests pin
// the bandwidth formulas (CollectiveLatency pins the per-step latencies).
DeviceProfile base_latency(DeviceProfile p) {
  p.cost.intra_step_latency_s = p.cost.inter_step_latency_s = 0;
  p.cost.ll_bandwidth_share = p.cost.tree_bandwidth_share = 0;
  return p;
}
Topo topo_of(const DeviceProfile& p, bool inter) {
  return {(inter ? p.inter_node_link_gbps * p.cost.inter_link_efficiency
                 : p.intra_node_link_gbps * p.cost.intra_link_efficiency) *
              1e9,
          p.cost.comm_latency_s};
}

TEST(CostModel, FullMeshSpreadsCollectivesOverTheLinksToEveryPeer) {
  const DeviceProfile p = base_latency(config::load_device_profile("Ascend910B3"));
  ASSERT_EQ(p.intra_node_topology, IntraNodeTopology::kFullMesh);
  const CostModel m(p);
  const Topo t = topo_of(p, false);
  const double S = 64e6;
  for (int n : {2, 4, 8}) {
    // Each rank's n-1 chunks of S/n go out over n-1 links at once: S/n per link.
    const double gather = S / n / t.bw;
    EXPECT_NEAR(m.comm_seconds(Collective::kAllGather, S, {n, 1}), gather + t.latency, 1e-12) << n;
    EXPECT_NEAR(m.comm_seconds(Collective::kReduceScatter, S, {n, 1}), gather + t.latency, 1e-12) << n;
    EXPECT_NEAR(m.comm_seconds(Collective::kAllReduce, S, {n, 1}), 2 * gather + t.latency, 1e-12) << n;
  }
  // Point-to-point and broadcast use one link.
  EXPECT_NEAR(m.comm_seconds(Collective::kPointToPoint, S, {2, 1}), S / t.bw + t.latency, 1e-12);
  EXPECT_NEAR(m.comm_seconds(Collective::kBroadcast, S, {8, 1}), S / t.bw + t.latency, 1e-12);
  // A group spanning nodes is a ring over RoCE.
  const Topo roce = topo_of(p, true);
  EXPECT_NEAR(m.comm_seconds(Collective::kAllReduce, S, {16, 16}), 2.0 * 15 / 16 * S / roce.bw + roce.latency, 1e-12);
  EXPECT_NEAR(m.comm_seconds(Collective::kAllGather, S, {4, 4}), 3.0 / 4 * S / roce.bw + roce.latency, 1e-12);
}

TEST(CostModel, SwitchRunsRingsAtEachGpusBandwidth) {
  for (const char* name : {"A100-SXM-80GB", "H100-SXM-80GB"}) {
    DeviceProfile p = base_latency(config::load_device_profile(name));
    ASSERT_EQ(p.intra_node_topology, IntraNodeTopology::kSwitch) << name;
    p.all_reduce_bus_gbps.clear();  // the ring formula (H100's measured NVLS: HierarchicalCollectives)
    const CostModel m(p);
    const Topo t = topo_of(p, false), ib = topo_of(p, true);
    const double S = 64e6;
    for (int n : {2, 8}) {
      EXPECT_NEAR(m.comm_seconds(Collective::kAllReduce, S, {n, 1}), 2.0 * (n - 1) / n * S / t.bw + t.latency, 1e-12);
      EXPECT_NEAR(m.comm_seconds(Collective::kAllGather, S, {n, 1}), (n - 1.0) / n * S / t.bw + t.latency, 1e-12);
      EXPECT_NEAR(m.comm_seconds(Collective::kReduceScatter, S, {n, n}), (n - 1.0) / n * S / ib.bw + ib.latency, 1e-12);
    }
  }
}

TEST(CostModel, FullMeshBeatsARingOverOneLinkByTheLinkCount) {
  // The same 8-NPU all-reduce: a full mesh is n-1 = 7 times faster than a ring on one of its links.
  DeviceProfile mesh, ring;
  ring.intra_node_topology = IntraNodeTopology::kRing;
  const CostModel a(mesh, round_constants()), b(ring, round_constants());
  EXPECT_NEAR(b.comm_seconds(Collective::kAllReduce, 1e9, {8, 1}) / a.comm_seconds(Collective::kAllReduce, 1e9, {8, 1}),
              7.0, 1e-12);
}

// all_to_all(-v): S = bytes sent + bytes received (CommEvent bytes +
// recv_bytes); D = S/2 per direction, D/n to each peer. The shipped
// profiles' numbers written out: 910B3 HCCS 28 GB/s · 0.66 = 18.48e9 B/s per
// link, RoCE 25 GB/s · 0.9 = 22.5e9 B/s; A100 NVSwitch 300 GB/s · 0.78 =
// 234e9 B/s per GPU, HDR 25 GB/s · 0.96 = 24e9 B/s; one step of latency:
// 910B3 10 µs (its base), A100 NCCL's LL 6.6 + 0.6 (3.7 across nodes) at half
// the bandwidth or Simple 8.4 + 3.4 (17): Simple for these sizes.
TEST(CostModel, AllToAllOnEachTopology) {
  const double D = 64e6, S = 2 * D, latency = 10e-6;
  const CostModel mesh(config::load_device_profile("Ascend910B3"));
  // Full mesh: 8 ranks each send D/8 to 7 peers over 7 links at once:
  // 8e6 / 18.48e9 = 432.9 µs.
  EXPECT_NEAR(mesh.comm_seconds(Collective::kAllToAll, S, {8, 1}), 8e6 / 18.48e9 + latency, 1e-12);
  EXPECT_NEAR(mesh.comm_seconds(Collective::kAllToAll, S, {2, 1}), 32e6 / 18.48e9 + latency, 1e-12);
  // Spanning nodes (16 ranks, two nodes): 15/16 of D through the NIC: 60e6 / 22.5e9 = 2.667 ms.
  EXPECT_NEAR(mesh.comm_seconds(Collective::kAllToAll, S, {16, 16}), 60e6 / 22.5e9 + latency + 17e-6, 1e-12);
  // Switch: 7/8 of D through the GPU's own port: 56e6 / 234e9 = 239.3 µs.
  const CostModel nvswitch(config::load_device_profile("A100-SXM-80GB"));
  EXPECT_NEAR(nvswitch.comm_seconds(Collective::kAllToAll, S, {8, 1}), 56e6 / 234e9 + 11.8e-6, 1e-12);
  EXPECT_NEAR(nvswitch.comm_seconds(Collective::kAllToAll, S, {4, 4}), 48e6 / 24e9 + 25.4e-6, 1e-12);
  // Ring (one link a device, 56 GB/s, bare formulas): the D/4 for the peer d
  // hops on crosses d links; each link carries (1 + 2 + 3) · D/4 = 1.5 D:
  // 1.5 · 64e6 / 56e9 = 1.714 ms. Over 2 ranks the ring is one link: D/2.
  DeviceProfile ring;
  ring.intra_node_topology = IntraNodeTopology::kRing;
  ring.intra_node_link_gbps = 56;
  const CostModel r(ring, round_constants());
  EXPECT_NEAR(r.comm_seconds(Collective::kAllToAll, S, {4, 1}), 96e6 / 56e9, 1e-12);
  EXPECT_NEAR(r.comm_seconds(Collective::kAllToAll, S, {2, 1}), 32e6 / 56e9, 1e-12);
  // A group of one keeps its block.
  EXPECT_EQ(mesh.comm_seconds(Collective::kAllToAll, S, {1, 1}), 0.0);
}

// The tile model (cost_model.h) on an A100-like profile with round numbers:
// 108 units, 256 x 128 tiles, 312 TFLOPS, efficiency 1, no fixed costs.
DeviceProfile tiled() {
  DeviceProfile p;
  p.peak_tflops_16bit = 312;
  p.hbm_gbps = 2039;
  p.compute_units = 108;
  p.gemm_tile_m = 256;
  p.gemm_tile_n = 128;
  return p;
}

TEST(GemmTileModel, FullWavesRunAtThePeak) {
  const CostModel m(tiled(), round_constants());
  // 108 tiles x 2 waves: m = 256·12 = 3072, n = 128·18 = 2304 -> 216 tiles = 2 full waves; k 4096.
  const double flops = 2.0 * 3072 * 2304 * 4096;
  EXPECT_NEAR(m.gemm_compute_seconds(3072, 2304, 4096, 1, true), flops / 312e12, 1e-15);
}

TEST(GemmTileModel, APartTileAndAPartWavePayInFull) {
  const CostModel m(tiled(), round_constants());
  // NVIDIA's guide's wave example: M 2304 (9 tile rows of 256), K 4096, N varied. N = 1536: 12 tile
  // columns, 108 tiles = 1 wave; N = 1664: 13 columns, 117 tiles -> 2 waves (the second has 9 tiles).
  const double wave = 2.0 * 256 * 128 * 4096 / (312e12 / 108);  // one tile per unit
  EXPECT_NEAR(m.gemm_compute_seconds(2304, 1536, 4096, 1, true), wave, 1e-15);
  EXPECT_NEAR(m.gemm_compute_seconds(2304, 1664, 4096, 1, true), 2 * wave, 1e-15);
  // One row more than a tile row: N = 1537 needs a 13th tile column too.
  EXPECT_NEAR(m.gemm_compute_seconds(2304, 1537, 4096, 1, true), 2 * wave, 1e-15);
  // Efficiency of the 1664 case: 2304·1664 / (2 waves · 108 tiles · 256·128) = 0.5417.
  const double useful = 2.0 * 2304 * 1664 * 4096 / 312e12;
  EXPECT_NEAR(useful / m.gemm_compute_seconds(2304, 1664, 4096, 1, true), 2304.0 * 1664 / (216.0 * 256 * 128), 1e-12);
}

TEST(GemmTileModel, SkinnyGemmIsMemoryBound) {
  const CostModel m(tiled(), round_constants());
  // A GEMV-like (m 1, n 8192, k 8192) at 2 bytes: bytes (8192 + 8192² + 8192) · 2 = 134.25 MB
  // -> 65.8 µs at 2039 GB/s; its one row of 64 tiles, cut to 64 rows, costs one wave of 2·64·128·8192 flops
  // (46.5 µs).
  KernelWork w{KernelKind::kGemm, 2.0 * 8192 * 8192, (8192.0 + 8192.0 * 8192 + 8192) * 2, 1, 8192, 8192};
  const double memory = w.bytes / 2039e9, wave = 2.0 * 64 * 128 * 8192 / (312e12 / 108);
  EXPECT_GT(memory, wave);
  EXPECT_NEAR(m.kernel_seconds(w, true), memory, 1e-15);
}

TEST(GemmTileModel, BatchedTilesShareTheWaves) {
  const CostModel m(tiled(), round_constants());
  // 27 independent 256 x 512 x 64 products: 4 tiles each, 108 tiles: one wave.
  const double wave = 2.0 * 256 * 128 * 64 / (312e12 / 108);
  EXPECT_NEAR(m.gemm_compute_seconds(256, 512, 64, 27, true), wave, 1e-15);
  EXPECT_NEAR(m.gemm_compute_seconds(256, 512, 64, 28, true), 2 * wave, 1e-15);
}

TEST(GemmTileModel, NoUnitsMeansThePlainPeak) {
  const CostModel m(DeviceProfile{}, round_constants());  // the default profile has no tile model
  EXPECT_NEAR(m.gemm_compute_seconds(1000, 1000, 1000, 1, true), 2e9 / 294.9e12, 1e-15);
}

TEST(FlashAttention, CausalRunsTheBlocksOnAndBelowTheDiagonal) {
  DeviceProfile p = tiled();
  p.attention_block = 128;
  CostConstants c = round_constants();
  c.flash_forward_efficiency = 0.5;
  c.flash_backward_efficiency = 0.25;
  const CostModel m(p, c);
  // T = 1024: 8 blocks a side, 8·9/2 = 36 of 64 run.
  EXPECT_DOUBLE_EQ(m.causal_block_share(1024, 1024), 36.0 / 64);
  // A query block shorter than the keys (aligned at the end): Tq 256 (2 blocks), Tk 1024 (8):
  // row 0 runs 7 key blocks, row 1 all 8: 15 of 16.
  EXPECT_DOUBLE_EQ(m.causal_block_share(256, 1024), 15.0 / 16);
  // A block that does not fill: T 100 is one block.
  EXPECT_DOUBLE_EQ(m.causal_block_share(100, 100), 1.0);
  // B·H = 32 heads, T 1024, D 128, 2 GEMMs forward: flops 2·2·32·1024²·128.
  const double full = 2.0 * 2 * 32 * 1024.0 * 1024 * 128;
  KernelWork f{KernelKind::kFlashForward, full, 0, 1024, 1024, 128, 32, true};
  EXPECT_NEAR(m.kernel_seconds(f, true), full * 36 / 64 / (312e12 * 0.5), 1e-15);
  f.causal = false;
  EXPECT_NEAR(m.kernel_seconds(f, true), full / (312e12 * 0.5), 1e-15);
  KernelWork b{KernelKind::kFlashBackward, 2.5 * full, 0, 1024, 1024, 128, 32, true};
  EXPECT_NEAR(m.kernel_seconds(b, true), 2.5 * full * 36 / 64 / (312e12 * 0.25), 1e-15);
}

TEST(UnfusedAttention, ItsGemmsByTheTileModelThenItsScorePasses) {
  const CostModel m(tiled(), round_constants());
  // B·H = 8 heads, T 2048, D 128, forward (2 GEMMs): QK^T 2048 x 2048 x 128 (8·16 = 128 tiles a head),
  // PV 2048 x 128 x 2048 (8 tiles a head); bytes 1e9.
  const double T = 2048, D = 128;
  KernelWork w{KernelKind::kUnfusedAttention, 2 * 2.0 * 8 * T * T * D, 1e9, 2048, 2048, 128, 8, false};
  const double qk = std::ceil(8 * 128 / 108.0) * 2.0 * 256 * 128 * D / (312e12 / 108);
  const double pv = std::ceil(8 * 8 / 108.0) * 2.0 * 256 * 128 * T / (312e12 / 108);
  EXPECT_NEAR(m.kernel_seconds(w, true), qk + pv + 1e9 / 2039e9, 1e-15);
}

TEST(MeasuredBusBandwidth, PricesCollectivesInsideANode) {
  DeviceProfile p;
  p.all_gather_bus_gbps = {{2, 19}, {8, 130}};
  p.all_reduce_bus_gbps = {{2, 18}};
  const CostModel m(p, round_constants());
  // all_gather 2 ranks, 38 MB: 1/2 · 38e6 / 19e9 = 1 ms; reduce_scatter the same.
  EXPECT_NEAR(m.comm_seconds(Collective::kAllGather, 38e6, {2, 1}), 1e-3, 1e-15);
  EXPECT_NEAR(m.comm_seconds(Collective::kReduceScatter, 38e6, {2, 1}), 1e-3, 1e-15);
  // 4 ranks: busbw 19 + (130 - 19)·2/6 = 56 GB/s; 3/4 · 56e6 / 56e9 = 0.75 ms.
  EXPECT_NEAR(m.comm_seconds(Collective::kAllGather, 56e6, {4, 1}), 0.75e-3, 1e-15);
  // all_reduce 8 ranks past the table's end: its last entry: 2·7/8 · 18e6 / 18e9 = 1.75 ms.
  EXPECT_NEAR(m.comm_seconds(Collective::kAllReduce, 18e6, {8, 1}), 1.75e-3, 1e-15);
  // Between nodes the table does not apply: the inter-node ring, 25 GB/s: 1/2 · 50e6 / 25e9 = 1 ms.
  EXPECT_NEAR(m.comm_seconds(Collective::kAllGather, 50e6, {2, 2}), 1e-3, 1e-15);
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
  EXPECT_NEAR(m.comm_seconds(Collective::kBroadcast, 25e6, {2, 2}), 2e-3 + 10e-6, 1e-12);
}

}  // namespace mtrain::device

namespace mtrain::device {
namespace {

DeviceProfile shipped(const std::string& name) { return config::load_device_profile(name); }

// A group spanning nodes runs one ring through them, its inter-node hops over
// the members' own NICs at once: B = min(B inside the node for p, p · NIC).
// DGX A100 (NVIDIA/nccl#812): 8 x 200 Gb HDR per node, "we measure 192GB/s
// AllReduce BusBW" across nodes; one member per node: the NIC's 24 GB/s.
TEST(HierarchicalCollectives, ARingAcrossNodesRunsAtTheNodesNics) {
  const CostModel m(shipped("A100-SXM-80GB"));
  const double S = 1e12;  // large: latency under 0.01 %
  const auto busbw = [&](Collective op, CommGroup g) {
    const double n = g.size;
    return (op == Collective::kAllReduce ? 2.0 : 1.0) * (n - 1) / n * S / m.comm_seconds(op, S, g);
  };
  EXPECT_NEAR(busbw(Collective::kAllReduce, {16, 2}) / 1e9, 192.0, 0.2);
  EXPECT_NEAR(busbw(Collective::kAllReduce, {64, 8}) / 1e9, 192.0, 0.2);
  EXPECT_NEAR(busbw(Collective::kAllGather, {16, 2}) / 1e9, 192.0, 0.2);
  EXPECT_NEAR(busbw(Collective::kAllReduce, {8, 8}) / 1e9, 24.0, 0.05);
  // Inside the node: the NVSwitch ring (nccl-tests #175: 232.5 GB/s on 8 A100).
  EXPECT_NEAR(busbw(Collective::kAllReduce, {8, 1}) / 1e9, 234.0, 0.3);
  // p = 2 per node: the two NICs (48 GB/s) are the bottleneck, not NVLink.
  EXPECT_NEAR(busbw(Collective::kAllReduce, {8, 4}) / 1e9, 48.0, 0.1);
}

// H100's all_reduce inside a node runs NVLink SHARP: the measured bus
// bandwidth (NVIDIA/nccl#1455: ring 370 GB/s, NVLS 480 GB/s on 8 H100);
// all_gather stays on the ring (361 GB/s measured on 8 H200).
TEST(HierarchicalCollectives, H100AllReduceRunsAtTheMeasuredNvls) {
  const CostModel m(shipped("H100-SXM-80GB"));
  const double S = 1e12;
  EXPECT_NEAR(2.0 * 7 / 8 * S / m.comm_seconds(Collective::kAllReduce, S, {8, 1}) / 1e9, 480.0, 0.5);
  EXPECT_NEAR(2.0 * 3 / 4 * S / m.comm_seconds(Collective::kAllReduce, S, {4, 1}) / 1e9, 370.0, 0.5);
  EXPECT_NEAR(7.0 / 8 * S / m.comm_seconds(Collective::kAllGather, S, {8, 1}) / 1e9, 360.0, 0.5);
  // Across 4 nodes, 8 per node: the node's 8 NDR NICs (8 x 50 x 0.94 = 376 GB/s) are slower than NVLS.
  EXPECT_NEAR(2.0 * 31 / 32 * S / m.comm_seconds(Collective::kAllReduce, S, {32, 4}) / 1e9, 376.0, 0.5);
}

// An all-to-all cannot aggregate a node's NICs (NVIDIA/nccl-tests#267): the
// off-node share of a rank's buffer goes through its own NIC, beside the
// on-node exchange. 910B3: 16 ranks on 2 nodes, D = 64 MB each way: off-node
// 8/16 · 64 MB at 25 · 0.9 GB/s; on-node D·8/16 = 32 MB over the mesh, 4 MB a link.
TEST(HierarchicalCollectives, AnAllToAllAcrossNodesGoesThroughEachRanksNic) {
  DeviceProfile p;  // 910B3: full mesh, 28 GB/s per HCCS link, 25 GB/s RoCE
  CostConstants c = round_constants();
  c.inter_link_efficiency = 0.9;
  const CostModel m(p, c);
  EXPECT_NEAR(m.comm_seconds(Collective::kAllToAll, 128e6, {16, 2}), 0.5 * 64e6 / 22.5e9, 1e-12);
  // One rank per node: all of it but its own share off-node, as before.
  EXPECT_NEAR(m.comm_seconds(Collective::kAllToAll, 128e6, {4, 4}), 0.75 * 64e6 / 22.5e9, 1e-12);
}

// NCCL's latency model (src/graph/tuning.cc @5067397c): base + steps · per-step
// latency, by protocol; the fastest of ring Simple, ring LL and (across
// nodes) tree Simple. The shipped GPU profiles carry its tables; the
// expected values are re-derived here from them.
TEST(CollectiveLatency, NcclsModelPicksTheFastestProtocolAndAlgorithm) {
  const CostModel m(shipped("A100-SXM-80GB"));
  const double B = 300e9 * 0.78;  // the intra-node ring's bus bandwidth
  // 8 bytes over 8 GPUs of a node: ring LL, 6.6 + 14 · 0.6 = 15.0 us (+ 8 B at half the bandwidth).
  EXPECT_NEAR(m.comm_seconds(Collective::kAllReduce, 8, {8, 1}), 15.0e-6 + 2.0 * 7 / 8 * 8 / (0.5 * B), 1e-12);
  // 1 GB: ring Simple, 8.4 + 14 · 3.4 = 56 us + the transfer.
  EXPECT_NEAR(m.comm_seconds(Collective::kAllReduce, 1e9, {8, 1}), 56.0e-6 + 2.0 * 7 / 8 * 1e9 / B, 1e-12);
  // all_gather of 8 bytes: 7 steps, LL: 6.6 + 7 · 0.6 = 10.8 us.
  EXPECT_NEAR(m.comm_seconds(Collective::kAllGather, 8, {8, 1}), 10.8e-6 + 7.0 / 8 * 8 / (0.5 * B), 1e-12);
  // 64 nodes x 8, 8 bytes: ring LL 6.6 + 896 · 0.6 + 126 · 3.7 = 1010.4 us; the tree (Simple)
  // 8.4 + 2 (7 · 3.4 + 6 · 17) = 260 us wins, as NCCL's trees do at scale.
  const double nic = 25e9 * 0.96, busbw = std::min(B, 8 * nic);
  const double tree = 260.0e-6 + 2 * 8 / (busbw * 0.92);
  EXPECT_NEAR(m.comm_seconds(Collective::kAllReduce, 8, {512, 64}), tree, 1e-12);
  // A point-to-point message: one step, LL for a small one (6.6 + 0.6 us), across nodes 6.6 + 3.7.
  EXPECT_NEAR(m.comm_seconds(Collective::kPointToPoint, 8, {2, 1}), 7.2e-6 + 8 / (0.5 * 300e9 * 0.78), 1e-12);
  EXPECT_NEAR(m.comm_seconds(Collective::kPointToPoint, 8, {2, 2}), 10.3e-6 + 8 / (0.5 * nic), 1e-12);
}

// HCCL's mesh inside a 910B node takes one step per phase (Mesh.md: all_gather
// alpha + n beta / p, all_reduce 2 alpha + ...): the base latency only, whatever the
// group size; across nodes the ring's inter-node steps are added.
TEST(CollectiveLatency, AMeshTakesOneStepPerPhase) {
  DeviceProfile p;  // 910B3
  CostConstants c = round_constants();
  c.comm_latency_s = 10e-6;
  c.intra_step_latency_s = 3e-6;
  c.inter_step_latency_s = 17e-6;
  const CostModel m(p, c);
  EXPECT_NEAR(m.comm_seconds(Collective::kAllGather, 0, {8, 1}), 10e-6 + 3e-6, 1e-15);
  EXPECT_NEAR(m.comm_seconds(Collective::kAllReduce, 0, {8, 1}), 10e-6 + 2 * 3e-6, 1e-15);
  // 4 nodes x 8, all_reduce: 62 ring steps, 6 of them across nodes.
  EXPECT_NEAR(m.comm_seconds(Collective::kAllReduce, 0, {32, 4}), 10e-6 + 56 * 3e-6 + 6 * 17e-6, 1e-15);
}

}  // namespace
}  // namespace mtrain::device
