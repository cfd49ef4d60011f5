#include "device/cost_model.h"

#include <algorithm>

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

// Link-time factor of an all-to-all on S = sent + received bytes (cost_model.h).
double CostModel::all_to_all_factor(double n, bool inter_node) const {
  const double one_direction = 0.5;
  if (inter_node || p_.intra_node_topology == IntraNodeTopology::kSwitch) return one_direction * (n - 1) / n;
  if (p_.intra_node_topology == IntraNodeTopology::kFullMesh) return one_direction / n;
  return one_direction * (n - 1) / 2;  // ring: relayed hop by hop
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

}  // namespace

double CostModel::comm_seconds(Collective op, double bytes, int group_size, bool inter_node) const {
  const double n = group_size;
  if (group_size <= 1 && op != Collective::kPointToPoint) return 0.0;
  if (!inter_node) {
    const bool reduce = op == Collective::kAllReduce;
    const bool gather = op == Collective::kAllGather || op == Collective::kReduceScatter;
    const double busbw = reduce   ? bus_gbps_at(p_.all_reduce_bus_gbps, group_size)
                         : gather ? bus_gbps_at(p_.all_gather_bus_gbps, group_size)
                                  : 0.0;
    if (busbw > 0) return (reduce ? 2.0 : 1.0) * (n - 1) / n * bytes / (busbw * 1e9) + c_.comm_latency_s;
  }
  const double bw = inter_node ? p_.inter_node_link_gbps * 1e9 * c_.inter_link_efficiency
                               : p_.intra_node_link_gbps * 1e9 * c_.intra_link_efficiency;
  double factor = 0;
  switch (op) {
    case Collective::kAllReduce:
      factor = 2 * (n - 1) / n;
      break;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      factor = (n - 1) / n;
      break;
    case Collective::kBroadcast:
    case Collective::kPointToPoint:
      factor = 1;
      break;
    case Collective::kBarrier:
      factor = 0;
      break;
    case Collective::kAllToAll:
      factor = all_to_all_factor(n, inter_node);
      break;
  }
  // A full mesh carries the ring's per-rank traffic over n-1 links at once.
  const bool spread = op == Collective::kAllReduce || op == Collective::kAllGather || op == Collective::kReduceScatter;
  if (spread && !inter_node && p_.intra_node_topology == IntraNodeTopology::kFullMesh) factor /= n - 1;
  return (bw > 0 ? factor * bytes / bw : 0.0) + c_.comm_latency_s;
}

}  // namespace mtrain::device
