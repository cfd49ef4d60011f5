// The MoE layer's buffers (moe_layer.h): what one layer keeps from forward to
// backward (MoeActs) and the temporaries all layers share (MoeWorkspace),
// each sized for the largest micro-batch and accounted as activations.
#include <algorithm>
#include <string>
#include <utility>

#include "moe/expert_dispatch.h"
#include "moe/moe_layer.h"
#include "moe/moe_layer_internal.h"

namespace mtrain::moe {

using detail::tokens_local;
using device::MemCategory;

namespace {

Tensor act_tensor(device::Device& dev, Shape s, DType t, const std::string& name, bool meta) {
  return Tensor(dev, std::move(s), t, MemCategory::kActivations, name, meta);
}

}  // namespace

void allocate_moe_acts(MoeActs& a, const MoeLayerConfig& c, int64_t B, int64_t T, device::Device& dev, bool meta,
                       const std::string& p) {
  const int64_t N = B * T, Nl = tokens_local(c, N), M = c.perm_rows(Nl), C = c.hidden, k = c.router.topk;
  const DType t = c.dtype;
  a.rows.assign(c.router.num_experts, 0);
  const int64_t slots = c.gather_group() * Nl * k;  // the allgather dispatcher routes the group's slots
  a.routing = act_tensor(dev, {2 * M + slots}, DType::kF32, p + "moe routing indices", meta);
  const int64_t Mg = c.max_expert_rows(Nl);
  a.x_perm = act_tensor(dev, {M, C}, t, p + "moe permuted tokens", meta);
  a.probs_perm = act_tensor(dev, {M}, DType::kF32, p + "moe permuted probs", meta);
  a.rows_grp.assign(c.num_local, 0);
  if ((c.etp > 1 || c.ep > 1) && !c.allgather_dispatch()) {
    a.counts.assign(c.etp * c.ep * c.num_local, 0);
    a.counts_etp.assign(c.etp * c.num_local, 0);
    a.rows_ep.assign(c.num_local, 0);
    a.x_grp = act_tensor(dev, {Mg, C}, t, p + "moe tokens of every TP rank, grouped by expert", meta);
  }
  a.fc1 = act_tensor(dev, {Mg, c.fc1_local()}, t, p + "moe expert fc1 output", meta);
  a.act = act_tensor(dev, {Mg, c.ffn_local()}, t, p + "moe expert activation output", meta);
  a.y_perm = act_tensor(dev, {M, C}, t, p + "moe expert output", meta);
  if (c.shared_ffn > 0) {
    a.shared_fc1 = act_tensor(dev, {N, c.shared_fc1_local()}, t, p + "shared expert fc1 output", meta);
    a.shared_act = act_tensor(dev, {N, c.shared_local()}, t, p + "shared expert activation output", meta);
    if (c.shared_gate) {
      a.shared_out = act_tensor(dev, {Nl, C}, t, p + "shared expert output before the gate", meta);
      a.gate = act_tensor(dev, {Nl}, DType::kF32, p + "shared expert gate", meta);
    }
  }
  if (c.lora_rank > 0) {  // adapters stay fp32 (lib/model/lora_layer.h)
    a.lora_h = act_tensor(dev, {2, Mg, c.lora_rank}, DType::kF32, p + "moe expert LoRA activations", meta);
    if (c.shared_ffn > 0)
      a.shared_lora_h = act_tensor(dev, {2, N, c.lora_rank}, DType::kF32, p + "shared expert LoRA activations", meta);
  }
}

void allocate_moe_workspace(MoeWorkspace& w, const MoeLayerConfig& c, int64_t B, int64_t T, device::Device& dev,
                            bool meta) {
  const int64_t N = B * T, Nl = tokens_local(c, N), M = c.perm_rows(Nl), C = c.hidden;
  const DType t = c.dtype;
  w.d_perm = act_tensor(dev, {M, C}, t, "moe grad of permuted rows", meta);
  const int64_t Mg = c.max_expert_rows(Nl);
  w.d_fc1 = act_tensor(dev, {Mg, c.fc1_local()}, t, "moe grad of expert fc1 output", meta);
  w.d_act = act_tensor(dev, {Mg, c.ffn_local()}, t, "moe grad of expert activation", meta);
  if (c.allgather_dispatch()) {  // the group's tokens and their slots (ids and probs, then their gradients)
    const int64_t G = c.gather_group();
    w.gathered = act_tensor(dev, {G * Nl, C}, t, "moe allgather dispatcher's tokens of the TP x EP group", meta);
    w.ag_slots = act_tensor(dev, {2 * G * Nl * c.router.topk}, DType::kF32, "moe allgather dispatcher's slots", meta);
  } else if (c.ep > 1) {  // with etp > 1 also the all-gather over expert TP of what the all-to-all brought
    w.gathered = act_tensor(dev, {c.etp * ep_recv_rows(c.ep, M), C}, t, "moe expert-parallel all-to-all buffer", meta);
    w.grp = act_tensor(dev, {Mg, C}, t, "moe grouped expert output / gradient", meta);
    if (c.etp > 1) w.ep_grp = act_tensor(dev, {ep_recv_rows(c.ep, M), C}, t, "moe rows received over EP", meta);
  } else if (c.etp > 1) {
    w.gathered = act_tensor(dev, {c.etp * M, C}, t, "moe expert-TP gather / reduce-scatter buffer", meta);
    w.grp = act_tensor(dev, {Mg, C}, t, "moe grouped expert output / gradient", meta);
  }
  w.dprobs = act_tensor(dev, {std::max(Nl * c.router.topk, Nl)}, DType::kF32, "moe grad of combine probs", meta);
  w.dlogits = act_tensor(dev, {Nl, c.router.num_experts}, DType::kF32, "moe grad of router logits", meta);
  w.routed = act_tensor(dev, {Nl, C}, t, "moe routed output", meta);
  int64_t scratch = M * C;  // unfused unpermute
  if (!c.fused_activation) scratch = std::max(scratch, 4 * Mg * c.ffn_local());
  if (c.shared_ffn > 0) {
    w.d_shared = act_tensor(dev, {Nl, C}, t, "shared expert grad before the gate", meta);
    w.shared_d_fc1 = act_tensor(dev, {N, c.shared_fc1_local()}, t, "shared expert grad of fc1 output", meta);
    w.shared_d_act = act_tensor(dev, {N, c.shared_local()}, t, "shared expert grad of activation", meta);
    if (!c.fused_activation) scratch = std::max(scratch, 4 * N * c.shared_local());
    if (!c.grad_accumulation) scratch = std::max(scratch, c.shared_fc1_local() * C);
  }
  w.scratch = act_tensor(dev, {std::max<int64_t>(scratch, 1)}, DType::kF32, "moe kernel scratch", meta);
  if (c.lora_rank > 0) {
    w.lora_dh = act_tensor(dev, {std::max(Mg, N), c.lora_rank}, DType::kF32, "moe LoRA grad", meta);
    if (c.shared_ffn > 0 || c.lora_dropout > 0.f)
      w.lora_scratch = act_tensor(dev, {std::max(N, Mg), std::max({C, c.shared_local(), c.ffn_local()})}, DType::kF32,
                                  "moe LoRA scratch", meta);
  }
}

}  // namespace mtrain::moe
