#include "model/moe_block.h"

#include "model/lora_layer.h"

namespace mtrain::model {

moe::MoeLayerConfig moe_layer_config(const ModelConfig& c) {
  moe::MoeLayerConfig m;
  m.router = c.moe.router;
  m.hidden = c.hidden;
  m.ffn = c.moe.ffn;
  m.num_local = c.moe.num_local();
  m.shared_ffn = c.moe.shared_ffn;
  m.shared_gate = c.moe.shared_gate;
  m.swiglu = c.swiglu;
  m.fused_activation = c.fusions.bias_activation;
  m.grouped_gemm = c.moe.grouped_gemm;
  m.permute_fusion = c.moe.permute_fusion;
  m.grad_accumulation = c.fusions.grad_accumulation;
  m.dtype = c.dtype;
  m.tp = c.tp;
  m.sequence_parallel = c.sequence_parallel;
  m.etp = c.expert_tp();
  m.ep = c.moe.ep;
  m.allgather = c.moe.allgather;
  m.routing_imbalance = c.moe.routing_imbalance;
  m.lora_rank = c.lora.enabled ? c.lora.rank : 0;
  m.lora_dropout = c.lora.enabled ? c.lora.dropout : 0.f;
  return m;
}

void add_moe_params(ParamStore& ps, const ModelConfig& c, const std::string& prefix, MoeLayerParams& mp) {
  const int64_t C = c.hidden, E = c.moe.num_experts, F = c.moe.ffn, FC1 = c.swiglu ? 2 * F : F;
  const std::string p = prefix + "mlp.";
  // Replicated over TP and fed by this rank's token shard (MoE under TP runs
  // with sequence parallelism): summed over TP, counted once in the norm.
  auto replicated = [&](const std::string& name, Shape shape, bool decay, Init init) {
    const int i = ps.add(name, std::move(shape), decay, init);
    ps.mutable_info(i).counts_in_norm = c.tp_rank == 0;
    ps.mutable_info(i).sequence_parallel_grad = c.sequence_parallel;
    return i;
  };
  mp.router_w = replicated(p + "router.weight", {E, C}, true, Init::kNormal);
  if (c.moe.router.enable_expert_bias) {
    // Megatron's fp32 buffer: moved by the aux-loss-free update (GptModel::update_expert_bias), not
    // by the optimizer; saved with the model, identical on every rank.
    mp.expert_bias = ps.add(p + "router.expert_bias", {E}, false, Init::kZeros);
    ps.mutable_info(mp.expert_bias).trainable = false;
    ps.mutable_info(mp.expert_bias).buffer = true;
  }
  // Routed experts: whole experts on every TP rank (ETP 1, replicated), or
  // split over the TP group like the dense MLP (ETP = TP: fc1 by rows, each
  // rank its gate and up halves; fc2 by columns; its bias added after the
  // reduction, so replicated).
  const bool split = c.expert_tp() > 1;
  const TpShard gate_up{TpSplit::kRows, c.swiglu ? 2 : 1, c.expert_tp(), c.tp_rank};
  const TpShard cols{TpSplit::kCols, 1, c.expert_tp(), c.tp_rank};
  // Under expert parallelism each rank holds its EP rank's experts (their
  // ETP slices), named by their global index: summed over expt-dp (which
  // holds the TP peers at ETP 1), counted once per EP x ETP shard in the norm.
  auto expert = [&](const std::string& name, Shape shape, bool decay, Init init, const TpShard& shard) {
    if (c.moe.ep > 1) {
      const int i = ps.add(name, std::move(shape), decay, init, split ? shard : TpShard{});
      ps.mutable_info(i).expert_parallel = true;
      return i;
    }
    return split ? ps.add(name, std::move(shape), decay, init, shard) : replicated(name, std::move(shape), decay, init);
  };
  // The fc2 bias is whole. EP x ETP: TP rank 0 adds it to the partial sums
  // (moe_layer.cc), so its gradient is summed over TP and counted once.
  auto fc2_bias = [&](const std::string& name) {
    if (c.moe.ep == 1) return replicated(name, {C}, false, Init::kZeros);
    const int i = expert(name, {C}, false, Init::kZeros, TpShard{});
    ps.mutable_info(i).sequence_parallel_grad = split;
    ps.mutable_info(i).counts_in_norm = !split || c.tp_rank == 0;
    return i;
  };
  for (int64_t e = c.moe.first_local(); e < c.moe.first_local() + c.moe.num_local(); ++e) {
    const std::string x = p + "experts.local_experts." + std::to_string(e) + ".";
    mp.fc1_w.push_back(expert(x + "linear_fc1.weight", {FC1, C}, true, Init::kNormal, gate_up));
    mp.fc1_b.push_back(c.add_bias_linear ? expert(x + "linear_fc1.bias", {FC1}, false, Init::kZeros, gate_up) : -1);
    mp.fc2_w.push_back(expert(x + "linear_fc2.weight", {C, F}, true, Init::kScaledNormal, cols));
    mp.fc2_b.push_back(c.add_bias_linear ? fc2_bias(x + "linear_fc2.bias") : -1);
  }
  if (c.moe.shared_ffn > 0) {
    const int64_t Fs = c.moe.shared_ffn;
    const TpShard s_gate_up{TpSplit::kRows, c.swiglu ? 2 : 1, c.tp, c.tp_rank};
    const TpShard s_cols{TpSplit::kCols, 1, c.tp, c.tp_rank};
    mp.shared_fc1 =
        ps.add(p + "shared_experts.linear_fc1.weight", {(c.swiglu ? 2 : 1) * Fs, C}, true, Init::kNormal, s_gate_up);
    mp.shared_fc2 = ps.add(p + "shared_experts.linear_fc2.weight", {C, Fs}, true, Init::kScaledNormal, s_cols);
    if (c.moe.shared_gate) mp.shared_gate = replicated(p + "shared_experts.gate_weight", {1, C}, true, Init::kNormal);
  }
}

moe::MoeWeights moe_weights(const ModelConfig& c, ParamStore& ps, const MoeLayerParams& mp, int64_t T, uint64_t seed,
                            bool training) {
  auto param = [&](int i) -> const float* { return i < 0 ? nullptr : ps.param(i); };
  auto grad = [&](int i) -> float* { return i < 0 ? nullptr : ps.grad(i); };
  moe::MoeWeights w;
  w.router = param(mp.router_w);
  w.router_grad = grad(mp.router_w);
  w.expert_bias = param(mp.expert_bias);
  for (auto* v : {&w.fc1, &w.fc2, &w.fc1_bias, &w.fc2_bias}) v->reserve(mp.fc1_w.size());
  for (auto* v : {&w.fc1_grad, &w.fc2_grad, &w.fc1_bias_grad, &w.fc2_bias_grad}) v->reserve(mp.fc1_w.size());
  for (size_t e = 0; e < mp.fc1_w.size(); ++e) {
    w.fc1.push_back(param(mp.fc1_w[e]));
    w.fc2.push_back(param(mp.fc2_w[e]));
    w.fc1_bias.push_back(param(mp.fc1_b[e]));
    w.fc2_bias.push_back(param(mp.fc2_b[e]));
    w.fc1_grad.push_back(grad(mp.fc1_w[e]));
    w.fc2_grad.push_back(grad(mp.fc2_w[e]));
    w.fc1_bias_grad.push_back(grad(mp.fc1_b[e]));
    w.fc2_bias_grad.push_back(grad(mp.fc2_b[e]));
  }
  w.shared_fc1 = param(mp.shared_fc1);
  w.shared_fc2 = param(mp.shared_fc2);
  w.shared_gate = param(mp.shared_gate);
  w.shared_fc1_grad = grad(mp.shared_fc1);
  w.shared_fc2_grad = grad(mp.shared_fc2);
  w.shared_gate_grad = grad(mp.shared_gate);
  if (c.lora.enabled) add_moe_adapter_weights(w, c, ps, mp, T, seed, training);
  return w;
}

void add_aux_losses(AuxLosses& sum, const moe::RouterForward& route, const moe::RouterConfig& cfg) {
  const moe::RouterLossValues& v = route.losses;
  if (route.aux_active)
    sum.weighted += cfg.aux_loss_coeff * v.load_balancing_loss.value_or(v.seq_load_balancing_loss.value_or(0.0));
  if (route.z_active)
    sum.weighted += *cfg.z_loss_coeff / static_cast<double>(route.token_group_size) * v.z_loss.value_or(0.0);
  for (size_t i = 0; i < route.expert_ids.size(); ++i) {
    const uint64_t x = static_cast<uint64_t>(route.expert_ids[i]) * 2 + (route.kept.empty() ? 1 : route.kept[i]);
    sum.routing_hash = (sum.routing_hash ^ x) * 1099511628211ULL;
  }
}

}  // namespace mtrain::model
