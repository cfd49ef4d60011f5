#include "moe/router_metrics.h"

#include <algorithm>
#include <stdexcept>

#include "parallel/comm.h"

namespace mtrain::moe {

namespace {
// Megatron's track_names order (training.py): the log line's key order.
constexpr const char* kNames[3] = {"load_balancing_loss", "seq_load_balancing_loss", "z_loss"};
constexpr int kZ = 2;  // values_ rows 0, 1: load-balancing losses (shares of the token group)
}  // namespace

RouterLossTracker::RouterLossTracker(int num_layers)
    : num_layers_(num_layers), values_(3 * static_cast<size_t>(num_layers), 0.0), recorded_(3, 0) {}

void RouterLossTracker::record(int layer, const RouterLossValues& v) {
  if (layer < 0 || layer >= num_layers_) throw std::out_of_range("RouterLossTracker: layer out of range");
  const std::optional<double>* slots[3] = {&v.load_balancing_loss, &v.seq_load_balancing_loss, &v.z_loss};
  for (int i = 0; i < 3; ++i) {
    if (!slots[i]->has_value()) continue;
    values_[i * num_layers_ + layer] += **slots[i];
    recorded_[i] = 1;
  }
}

std::vector<std::pair<std::string, double>> RouterLossTracker::report(int num_microbatches, int num_moe_layers,
                                                                      parallel::Comm& pp, parallel::Comm& token_group,
                                                                      parallel::Comm& tp_dp_cp, parallel::Comm& dp) {
  if (num_moe_layers < 1) throw std::invalid_argument("RouterLossTracker: MoE metrics require at least one MoE layer");
  const int64_t L = num_layers_;
  // Each layer lives on one stage: the sum over the pipeline gathers them.
  pp.all_reduce(values_.data(), 3 * L, parallel::ReduceOp::kSum);
  pp.all_reduce(recorded_.data(), 3, parallel::ReduceOp::kMax);
  // Load-balancing: every rank of the token group holds a share.
  token_group.all_reduce(values_.data(), 2 * L, parallel::ReduceOp::kSum);
  // z_loss: each rank's mean over its tokens, averaged.
  double* z = values_.data() + kZ * L;
  tp_dp_cp.all_reduce(z, L, parallel::ReduceOp::kSum);
  for (int64_t l = 0; l < L; ++l) z[l] /= tp_dp_cp.size();
  dp.all_reduce(values_.data(), 3 * L, parallel::ReduceOp::kSum);
  std::vector<std::pair<std::string, double>> out;
  for (int i = 0; i < 3; ++i) {
    if (!recorded_[i]) continue;
    double sum = 0;
    for (int64_t l = 0; l < L; ++l) sum += values_[i * L + l] / dp.size() / num_microbatches;
    out.emplace_back(kNames[i], sum / num_moe_layers);
  }
  std::fill(values_.begin(), values_.end(), 0.0);
  std::fill(recorded_.begin(), recorded_.end(), 0);
  return out;
}

}  // namespace mtrain::moe
