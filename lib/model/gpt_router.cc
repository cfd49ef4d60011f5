// GptModel's router state across the micro-batches of a step: the logged
// router losses (moe::RouterLossTracker, Megatron's MoE metrics tracker) and
// the aux-loss-free expert bias (Megatron's local_tokens_per_expert buffer
// and _update_router_expert_bias).
#include <algorithm>

#include "common/errors.h"
#include "model/gpt.h"
#include "profiler/kernel_region.h"

namespace mtrain::model {

void GptModel::init_router_state(bool meta) {
  moe_row_.assign(layers_.size(), -1);
  int rows = 0;
  for (size_t i = 0; i < layers_.size(); ++i)
    if (layers_[i].moe && layers_[i].moe->expert_bias >= 0) moe_row_[i] = rows++;
  if (rows == 0) return;
  // Megatron's non-persistent fp32 buffer on the device, one row per MoE layer.
  expert_counts_ = Tensor(dev_, {rows, config_.moe.num_experts}, DType::kF32, device::MemCategory::kOther,
                          "router tokens per expert (expert bias)", meta);
  if (!meta) expert_counts_.zero();
}

// After the training forward (not a recompute) of global layer `layer`,
// layers_[layer_index]: Megatron records the losses and counts the routing
// map only under grad mode, so each micro-batch counts once.
void GptModel::record_routing(int layer, int layer_index, const moe::RouterForward& route) {
  if (profiler::shape_only()) return;  // nothing was routed
  router_losses_.record(layer, route.losses);
  const int row = moe_row_[layer_index];
  if (row >= 0)
    moe::add_routing_counts(expert_counts_.data() + row * config_.moe.num_experts, route, config_.moe.router);
}

std::vector<std::pair<std::string, double>> GptModel::take_aux_log(parallel::ParallelState& st, int64_t microbatches) {
  const MoeSettings& m = config_.moe;
  if (m.num_experts == 0) return {};
  int moe_layers = 0;
  for (int v : m.layers) moe_layers += v;
  return router_losses_.report(static_cast<int>(std::max<int64_t>(1, microbatches)), moe_layers, st.pp(),
                               st.group(parallel::GroupKind::kTensorContext),
                               st.group(parallel::GroupKind::kTensorDataContext), st.dp());
}

void GptModel::update_expert_bias(parallel::Comm& tp_dp_cp) {
  const int64_t rows = expert_counts_.numel() > 0 ? expert_counts_.shape()[0] : 0;
  if (rows == 0) return;
  const int64_t E = config_.moe.num_experts;
  // The biases are separate buffers; the update runs on a stacked copy (one collective).
  std::vector<float> bias(profiler::shape_only() ? 0 : rows * E);
  for (size_t i = 0; i < layers_.size() && !bias.empty(); ++i)
    if (moe_row_[i] >= 0) std::copy_n(params_.param(layers_[i].moe->expert_bias), E, bias.data() + moe_row_[i] * E);
  if (profiler::shape_only()) {  // a dry run: only the all-reduce of the counts is priced
    tp_dp_cp.all_reduce_sum(expert_counts_.data(), rows * E);
    return;
  }
  moe::expert_bias_update(bias.data(), expert_counts_.data(), rows, E, config_.moe.router.bias_update_rate, tp_dp_cp);
  for (size_t i = 0; i < layers_.size(); ++i)
    if (moe_row_[i] >= 0) std::copy_n(bias.data() + moe_row_[i] * E, E, params_.param(layers_[i].moe->expert_bias));
}

}  // namespace mtrain::model
