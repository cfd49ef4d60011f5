// The router losses as Megatron's log line shows them (its MoE metrics
// tracker, moe_logging.py): each MoE layer's values are summed over the
// micro-batches of an iteration, then reduced — load-balancing losses summed
// over the pipeline and the token group (each rank holds a share), z_loss
// averaged over TP×DP×CP, both averaged over data parallelism — scaled by
// 1 / num_microbatches and averaged over the MoE layers.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "moe/router.h"

namespace mtrain::parallel {
class Comm;
}

namespace mtrain::moe {

class RouterLossTracker {
 public:
  // num_layers: every decoder layer of the model (a layer's slot is its
  // 0-based number, so all pipeline stages agree on the layout).
  explicit RouterLossTracker(int num_layers);

  // After each training forward of layer `layer`'s router.
  void record(int layer, const RouterLossValues& values);

  // Collectives on every group (every rank of the run calls it, also ranks
  // whose stage has no MoE layer). Returns (name, value) in the order
  // Megatron's log line prints them (its track_names: load_balancing_loss,
  // seq_load_balancing_loss, z_loss) for the losses recorded anywhere, and
  // clears the tracker. pp: this rank's pipeline
  // group; token_group: TP×CP; tp_dp_cp: TP×DP×CP; dp: data parallel.
  std::vector<std::pair<std::string, double>> report(int num_microbatches, int num_moe_layers, parallel::Comm& pp,
                                                     parallel::Comm& token_group, parallel::Comm& tp_dp_cp,
                                                     parallel::Comm& dp);

 private:
  int num_layers_;
  std::vector<double> values_;     // (3, num_layers): load_balancing_loss, seq_load_balancing_loss, z_loss
  std::vector<int32_t> recorded_;  // (3)
};

}  // namespace mtrain::moe
