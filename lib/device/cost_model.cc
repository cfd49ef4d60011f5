#include "device/cost_model.h"

#include <algorithm>

namespace mtrain::device {

double CostModel::kernel_seconds(double flops, double bytes, bool sixteen_bit) const {
  const double peak = (sixteen_bit ? p_.peak_tflops_16bit : p_.peak_tflops_fp32) * 1e12;
  const double compute = peak > 0 ? flops / (peak * c_.compute_efficiency) : 0.0;
  const double hbm = p_.hbm_gbps * 1e9;
  const double memory = hbm > 0 ? bytes / (hbm * c_.memory_efficiency) : 0.0;
  return std::max(compute, memory) + c_.launch_overhead_s;
}

// Link-time factor of an all-to-all on S = sent + received bytes (cost_model.h).
double CostModel::all_to_all_factor(double n, bool inter_node) const {
  const double one_direction = 0.5;
  if (inter_node || p_.intra_node_topology == IntraNodeTopology::kSwitch) return one_direction * (n - 1) / n;
  if (p_.intra_node_topology == IntraNodeTopology::kFullMesh) return one_direction / n;
  return one_direction * (n - 1) / 2;  // ring: relayed hop by hop
}

double CostModel::comm_seconds(Collective op, double bytes, int group_size, bool inter_node) const {
  const double n = group_size;
  if (group_size <= 1 && op != Collective::kPointToPoint) return 0.0;
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
