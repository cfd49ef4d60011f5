#include "device/cost_model.h"

#include <algorithm>
#include <cmath>

namespace mtrain::device {

double CostModel::peak_flops(bool sixteen_bit) const {
  return (sixteen_bit ? p_.peak_tflops_16bit : p_.peak_tflops_fp32) * 1e12;
}

double CostModel::memory_seconds(double bytes) const {
  const double hbm = p_.hbm_gbps * 1e9;
  return hbm > 0 && c_.memory_efficiency > 0 ? bytes / (hbm * c_.memory_efficiency) : 0.0;
}

double CostModel::roofline(double compute_s, double bytes) const {
  return std::max(compute_s, memory_seconds(bytes)) + c_.launch_overhead_s;
}

double CostModel::kernel_seconds(double flops, double bytes, bool sixteen_bit) const {
  const double peak = peak_flops(sixteen_bit);
  return roofline(peak > 0 ? flops / (peak * c_.compute_efficiency) : 0.0, bytes);
}

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
// The smallest tile edge of the tile model (NVIDIA's GEMM guide: cuBLAS's least efficient tile is 64 x 64).
constexpr int64_t kMinTile = 64;
}  // namespace

double CostModel::gemm_compute_seconds(int64_t m, int64_t n, int64_t k, int64_t batch, bool sixteen_bit) const {
  const double peak = peak_flops(sixteen_bit) * c_.compute_efficiency;
  if (peak <= 0 || m <= 0 || n <= 0 || k <= 0) return 0.0;
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) * batch;
  if (p_.compute_units <= 0 || p_.gemm_tile_m <= 0 || p_.gemm_tile_n <= 0) return flops / peak;
  // A dimension below the tile runs a smaller tile (cuBLAS's smallest is 64 x 64).
  const int64_t tm = std::min<int64_t>(p_.gemm_tile_m, ceil_div(m, kMinTile) * kMinTile);
  const int64_t tn = std::min<int64_t>(p_.gemm_tile_n, ceil_div(n, kMinTile) * kMinTile);
  const int64_t tiles = ceil_div(m, tm) * ceil_div(n, tn) * std::max<int64_t>(1, batch);
  const double waves = static_cast<double>(ceil_div(tiles, p_.compute_units));
  const double tile_flops = 2.0 * static_cast<double>(tm) * static_cast<double>(tn) * static_cast<double>(k);
  return waves * tile_flops / (peak / p_.compute_units);
}

double CostModel::causal_block_share(int64_t tq, int64_t tk) const {
  const int64_t blk = std::max(1, p_.attention_block);
  const int64_t nq = ceil_div(tq, blk), nk = ceil_div(tk, blk);
  if (nq <= 0 || nk <= 0) return 1.0;
  // Query block i (aligned to the keys' end: the last query sees every key)
  // runs key blocks 0 .. i + (nk - nq).
  int64_t run = 0;
  for (int64_t i = 0; i < nq; ++i) run += std::clamp<int64_t>(i + (nk - nq) + 1, 0, nk);
  return static_cast<double>(run) / static_cast<double>(nq * nk);
}

double CostModel::kernel_seconds(const KernelWork& w, bool sixteen_bit) const {
  switch (w.kind) {
    case KernelKind::kMemory:
      return kernel_seconds(w.flops, w.bytes, sixteen_bit);
    case KernelKind::kGemm:
      return roofline(gemm_compute_seconds(w.m, w.n, w.k, w.batch, sixteen_bit), w.bytes);
    case KernelKind::kFlashForward:
    case KernelKind::kFlashBackward: {
      const double set =
          w.kind == KernelKind::kFlashForward ? c_.flash_forward_efficiency : c_.flash_backward_efficiency;
      const double eff = set > 0 ? set : c_.compute_efficiency;
      const double peak = peak_flops(sixteen_bit) * eff;
      const double share = w.causal ? causal_block_share(w.m, w.n) : 1.0;
      return roofline(peak > 0 ? w.flops * share / peak : 0.0, w.bytes);
    }
    case KernelKind::kUnfusedAttention: {
      // w.flops counts `gemms` Tq x Tk x D products per head: half of them
      // shaped (Tq, Tk, D) (scores and their gradient), half (Tq, D, Tk).
      const double one = 2.0 * static_cast<double>(w.m) * w.n * w.k * w.batch;
      const double gemms = one > 0 ? w.flops / one : 0.0;
      const double compute = gemms / 2 *
                             (gemm_compute_seconds(w.m, w.n, w.k, w.batch, sixteen_bit) +
                              gemm_compute_seconds(w.m, w.k, w.n, w.batch, sixteen_bit));
      return compute + memory_seconds(w.bytes) + c_.launch_overhead_s;
    }
  }
  return 0.0;
}

namespace {

// busbw(n) of a measured table: linear between its group sizes, the nearest
// entry outside them; 0 for an empty table.
double bus_gbps_at(const std::vector<BusBandwidth>& table, int n) {
  if (table.empty()) return 0.0;
  if (n <= table.front().ranks) return table.front().gbps;
  for (size_t i = 1; i < table.size(); ++i) {
    const BusBandwidth &a = table[i - 1], &b = table[i];
    if (n <= b.ranks) return a.gbps + (b.gbps - a.gbps) * (n - a.ranks) / static_cast<double>(b.ranks - a.ranks);
  }
  return table.back().gbps;
}

// The share of the buffer a rank moves: all_reduce 2(n-1)/n, all_gather / reduce_scatter (n-1)/n.
double ring_factor(Collective op, double n) { return (op == Collective::kAllReduce ? 2.0 : 1.0) * (n - 1) / n; }

}  // namespace

double CostModel::bus_bandwidth(Collective op, int ranks) const {
  const double measured = op == Collective::kAllReduce ? bus_gbps_at(p_.all_reduce_bus_gbps, ranks)
                                                       : bus_gbps_at(p_.all_gather_bus_gbps, ranks);
  if (measured > 0) return measured * 1e9;
  const double link = p_.intra_node_link_gbps * 1e9 * c_.intra_link_efficiency;
  return p_.intra_node_topology == IntraNodeTopology::kFullMesh ? (ranks - 1) * link : link;
}

double CostModel::transfer_seconds(Collective op, double bytes, const CommGroup& g) const {
  const double n = g.size, per = g.per_node();
  const bool across = g.nodes > 1;
  const double link = p_.intra_node_link_gbps * 1e9 * c_.intra_link_efficiency;
  const double nic = p_.inter_node_link_gbps * 1e9 * c_.inter_link_efficiency;
  const auto over = [](double b, double bw) { return bw > 0 ? b / bw : 0.0; };
  switch (op) {
    case Collective::kAllReduce:
    case Collective::kAllGather:
    case Collective::kReduceScatter: {
      double busbw = bus_bandwidth(op, g.size);
      if (across) busbw = per > 1 ? std::min(bus_bandwidth(op, static_cast<int>(per)), per * nic) : nic;
      return over(ring_factor(op, n) * bytes, busbw);
    }
    case Collective::kBroadcast:
    case Collective::kPointToPoint:
      return over(bytes, across ? nic : link);
    case Collective::kBarrier:
      return 0.0;
    case Collective::kAllToAll: {
      // On-node part: the p ranks of a node exchange D·p/n among themselves.
      const double d = 0.5 * bytes, local = across ? d * per / n : d;
      double on_node = 0;
      if (per > 1) {
        if (p_.intra_node_topology == IntraNodeTopology::kFullMesh)
          on_node = over(local / per, link);
        else if (p_.intra_node_topology == IntraNodeTopology::kSwitch)
          on_node = over((per - 1) / per * local, link);
        else
          on_node = over((per - 1) / 2 * local, link);  // ring: relayed hop by hop
      }
      return across ? std::max(over((n - per) / n * d, nic), on_node) : on_node;
    }
  }
  return 0.0;
}

double CostModel::latency_seconds(Collective op, const CommGroup& g, double base, double intra, double inter) const {
  const int n = g.size, nodes = std::max(1, g.nodes);
  const bool mesh = nodes == 1 && p_.intra_node_topology == IntraNodeTopology::kFullMesh;
  int steps = 1, inter_steps = nodes > 1 ? 1 : 0;
  switch (op) {
    case Collective::kAllReduce:
    case Collective::kBarrier:
      steps = mesh ? 2 : 2 * (n - 1);
      inter_steps = 2 * (nodes - 1);
      break;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      steps = mesh ? 1 : n - 1;
      inter_steps = nodes - 1;
      break;
    case Collective::kBroadcast:
      steps = n - 1;
      inter_steps = nodes - 1;
      break;
    case Collective::kPointToPoint:
    case Collective::kAllToAll:
      break;
  }
  inter_steps = std::min(inter_steps, steps);
  return base + (steps - inter_steps) * intra + inter_steps * inter;
}

double CostModel::comm_seconds(Collective op, double bytes, CommGroup g) const {
  if (g.size <= 1 && op != Collective::kPointToPoint) return 0.0;
  g.nodes = std::clamp(g.nodes, 1, std::max(1, g.size));
  const double transfer = transfer_seconds(op, bytes, g);
  double best = latency_seconds(op, g, c_.comm_latency_s, c_.intra_step_latency_s, c_.inter_step_latency_s) + transfer;
  if (c_.ll_bandwidth_share > 0)
    best =
        std::min(best, latency_seconds(op, g, c_.ll_latency_s, c_.ll_intra_step_latency_s, c_.ll_inter_step_latency_s) +
                           transfer / c_.ll_bandwidth_share);
  if (c_.tree_bandwidth_share > 0 && op == Collective::kAllReduce && g.nodes > 1) {
    const double depth = std::ceil(std::log2(static_cast<double>(g.nodes)));
    const double lat =
        c_.comm_latency_s + 2 * ((g.per_node() - 1) * c_.intra_step_latency_s + depth * c_.inter_step_latency_s);
    // The ring's transfer moves 2(n-1)/n of S; the tree moves 2 S at its share of B.
    const double tree = transfer * g.size / (g.size - 1.0) / c_.tree_bandwidth_share;
    best = std::min(best, lat + tree);
  }
  return best;
}

}  // namespace mtrain::device
