// The MoE layer's buffers (moe_layer.h): what one layer keeps from forward to
// backward (MoeActs) and the temporaries all layers share (MoeWorkspace),
// accounted as activations.
//
// The buffers that hold the rows this rank's experts see are sized on the
// host for the worst case (every routed token of the dispatch group on this
// rank's experts), but the device is charged, as Megatron's dynamically
// allocated dispatch would use it, for the planned rows
// (MoeLayerConfig::planned_expert_rows: balanced routing times
// --moe_routing_imbalance, or the capacity bound). The difference is the
// device's contingent (the report's "if routing collapses" line); a real
// micro-batch whose routing brings more rows holds the excess as its own
// allocation (MoeRowsBeyondPlan) until its backward ends.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "moe/expert_dispatch.h"
#include "moe/moe_layer.h"
#include "moe/moe_layer_internal.h"

namespace mtrain::moe {

using detail::tokens_local;
using device::MemCategory;

namespace {

// One buffer: where it lives, its dtype, name, and its shape when the
// experts see `rows` rows (0 elements: not allocated).
template <class Owner>
struct Buffer {
  Tensor Owner::*member;
  DType dtype;
  std::string name;
  Shape shape;
};

// The rows the permutation buffers hold: the sender's own (alltoall) or,
// with the allgather dispatcher, the local experts' rows of the group's tokens.
int64_t perm_rows_for(const MoeLayerConfig& c, int64_t Nl, int64_t rows) {
  return c.allgather_dispatch() ? rows : c.perm_rows(Nl);
}

std::vector<Buffer<MoeActs>> act_buffers(const MoeLayerConfig& c, int64_t B, int64_t T, int64_t rows) {
  const int64_t N = B * T, Nl = tokens_local(c, N), M = perm_rows_for(c, Nl, rows), C = c.hidden;
  const DType t = c.dtype, f32 = DType::kF32;
  const int64_t slots = c.gather_group() * Nl * c.router.topk;  // the allgather dispatcher routes the group's slots
  std::vector<Buffer<MoeActs>> b = {
      {&MoeActs::routing, f32, "moe routing indices", {2 * M + slots}},
      {&MoeActs::x_perm, t, "moe permuted tokens", {M, C}},
      {&MoeActs::probs_perm, f32, "moe permuted probs", {M}},
  };
  if ((c.etp > 1 || c.ep > 1) && !c.allgather_dispatch())
    b.push_back({&MoeActs::x_grp, t, "moe tokens of every TP rank, grouped by expert", {rows, C}});
  b.push_back({&MoeActs::fc1, t, "moe expert fc1 output", {rows, c.fc1_local()}});
  b.push_back({&MoeActs::act, t, "moe expert activation output", {rows, c.ffn_local()}});
  b.push_back({&MoeActs::y_perm, t, "moe expert output", {M, C}});
  if (c.shared_ffn > 0) {
    b.push_back({&MoeActs::shared_fc1, t, "shared expert fc1 output", {N, c.shared_fc1_local()}});
    b.push_back({&MoeActs::shared_act, t, "shared expert activation output", {N, c.shared_local()}});
    if (c.shared_gate) {
      b.push_back({&MoeActs::shared_out, t, "shared expert output before the gate", {Nl, C}});
      b.push_back({&MoeActs::gate, f32, "shared expert gate", {Nl}});
    }
  }
  if (c.lora_rank > 0) {  // adapters stay fp32 (lib/model/lora_layer.h)
    b.push_back({&MoeActs::lora_h, f32, "moe expert LoRA activations", {2, rows, c.lora_rank}});
    if (c.shared_ffn > 0)
      b.push_back({&MoeActs::shared_lora_h, f32, "shared expert LoRA activations", {2, N, c.lora_rank}});
  }
  return b;
}

std::vector<Buffer<MoeWorkspace>> workspace_buffers(const MoeLayerConfig& c, int64_t B, int64_t T, int64_t rows) {
  const int64_t N = B * T, Nl = tokens_local(c, N), M = perm_rows_for(c, Nl, rows), C = c.hidden;
  const DType t = c.dtype, f32 = DType::kF32;
  std::vector<Buffer<MoeWorkspace>> b = {
      {&MoeWorkspace::d_perm, t, "moe grad of permuted rows", {M, C}},
      {&MoeWorkspace::d_fc1, t, "moe grad of expert fc1 output", {rows, c.fc1_local()}},
      {&MoeWorkspace::d_act, t, "moe grad of expert activation", {rows, c.ffn_local()}},
  };
  if (c.allgather_dispatch()) {  // the group's tokens and their slots (ids and probs, then their gradients)
    const int64_t G = c.gather_group();
    b.push_back({&MoeWorkspace::gathered, t, "moe allgather dispatcher's tokens of the TP x EP group", {G * Nl, C}});
    b.push_back({&MoeWorkspace::ag_slots, f32, "moe allgather dispatcher's slots", {2 * G * Nl * c.router.topk}});
  } else if (c.ep > 1) {  // with etp > 1 also the all-gather over expert TP of what the all-to-all brought
    b.push_back({&MoeWorkspace::gathered, t, "moe expert-parallel all-to-all buffer", {rows, C}});
    b.push_back({&MoeWorkspace::grp, t, "moe grouped expert output / gradient", {rows, C}});
    if (c.etp > 1) b.push_back({&MoeWorkspace::ep_grp, t, "moe rows received over EP", {rows / c.etp, C}});
  } else if (c.etp > 1) {
    b.push_back({&MoeWorkspace::gathered, t, "moe expert-TP gather / reduce-scatter buffer", {rows, C}});
    b.push_back({&MoeWorkspace::grp, t, "moe grouped expert output / gradient", {rows, C}});
  }
  b.push_back({&MoeWorkspace::dprobs, f32, "moe grad of combine probs", {std::max(Nl * c.router.topk, Nl)}});
  b.push_back({&MoeWorkspace::dlogits, f32, "moe grad of router logits", {Nl, c.router.num_experts}});
  b.push_back({&MoeWorkspace::routed, t, "moe routed output", {Nl, C}});
  int64_t scratch = M * C;  // unfused unpermute
  if (!c.fused_activation) scratch = std::max(scratch, 4 * rows * c.ffn_local());
  if (c.shared_ffn > 0) {
    b.push_back({&MoeWorkspace::d_shared, t, "shared expert grad before the gate", {Nl, C}});
    b.push_back({&MoeWorkspace::shared_d_fc1, t, "shared expert grad of fc1 output", {N, c.shared_fc1_local()}});
    b.push_back({&MoeWorkspace::shared_d_act, t, "shared expert grad of activation", {N, c.shared_local()}});
    if (!c.fused_activation) scratch = std::max(scratch, 4 * N * c.shared_local());
    if (!c.grad_accumulation) scratch = std::max(scratch, c.shared_fc1_local() * C);
  }
  b.push_back({&MoeWorkspace::scratch, f32, "moe kernel scratch", {std::max<int64_t>(scratch, 1)}});
  if (c.lora_rank > 0) {
    b.push_back({&MoeWorkspace::lora_dh, f32, "moe LoRA grad", {std::max(rows, N), c.lora_rank}});
    if (c.shared_ffn > 0 || c.lora_dropout > 0.f)
      b.push_back({&MoeWorkspace::lora_scratch,
                   f32,
                   "moe LoRA scratch",
                   {std::max(N, rows), std::max({C, c.shared_local(), c.ffn_local()})}});
  }
  return b;
}

// Each buffer on the host for the worst case, charged on the device for the planned rows.
template <class Owner>
void allocate_buffers(Owner& o, const std::vector<Buffer<Owner>>& worst, const std::vector<Buffer<Owner>>& planned,
                      device::Device& dev, bool meta, const std::string& prefix) {
  for (size_t i = 0; i < worst.size(); ++i)
    o.*worst[i].member = Tensor(dev, worst[i].shape, worst[i].dtype, MemCategory::kActivations, prefix + worst[i].name,
                                meta, shape_numel(planned[i].shape));
}

template <class Owner>
int64_t device_bytes(const std::vector<Buffer<Owner>>& b) {
  int64_t s = 0;
  for (const Buffer<Owner>& x : b) s += shape_numel(x.shape) * dtype_bytes(x.dtype);
  return s;
}

}  // namespace

int64_t MoeLayerConfig::planned_expert_rows(int64_t n_loc) const {
  const int64_t E = router.num_experts;
  // Every expert at most its capacity from each sender (balanced: its share, rounded up, times the allowance).
  const int64_t per_expert =
      router.capacity_factor
          ? expert_capacity(n_loc, E, router.topk, *router.capacity_factor)
          : static_cast<int64_t>(std::ceil(routing_imbalance * static_cast<double>(max_rows(n_loc)) / E));
  return std::min(max_expert_rows(n_loc), etp * E * per_expert);
}

void MoeRowsBeyondPlan::hold(int64_t b) {
  if (b == bytes || !dev) return;
  if (bytes > 0) dev->release(bytes, MemCategory::kActivations, name);
  bytes = 0;
  if (b > 0) dev->allocate(b, MemCategory::kActivations, name);
  bytes = b;
}

MoeRowsBeyondPlan& MoeRowsBeyondPlan::operator=(MoeRowsBeyondPlan&& o) noexcept {
  if (this != &o) {
    if (dev && bytes > 0) dev->release(bytes, MemCategory::kActivations, name);
    dev = o.dev;
    bytes = o.bytes;
    name = std::move(o.name);
    o.bytes = 0;
  }
  return *this;
}

void allocate_moe_acts(MoeActs& a, const MoeLayerConfig& c, int64_t B, int64_t T, device::Device& dev, bool meta,
                       const std::string& p) {
  const int64_t Nl = tokens_local(c, B * T);
  a.sized_B = B, a.sized_T = T;
  a.rows.assign(c.router.num_experts, 0);
  a.rows_grp.assign(c.num_local, 0);
  if ((c.etp > 1 || c.ep > 1) && !c.allgather_dispatch()) {
    a.counts.assign(c.etp * c.ep * c.num_local, 0);
    a.counts_etp.assign(c.etp * c.num_local, 0);
    a.rows_ep.assign(c.num_local, 0);
  }
  allocate_buffers(a, act_buffers(c, B, T, c.max_expert_rows(Nl)), act_buffers(c, B, T, c.planned_expert_rows(Nl)), dev,
                   meta, p);
  a.beyond = MoeRowsBeyondPlan(dev, p + "moe expert rows beyond the planned routing");
}

void allocate_moe_workspace(MoeWorkspace& w, const MoeLayerConfig& c, int64_t B, int64_t T, device::Device& dev,
                            bool meta) {
  const int64_t Nl = tokens_local(c, B * T);
  allocate_buffers(w, workspace_buffers(c, B, T, c.max_expert_rows(Nl)),
                   workspace_buffers(c, B, T, c.planned_expert_rows(Nl)), dev, meta, "");
  w.beyond = MoeRowsBeyondPlan(dev, "moe expert rows beyond the planned routing (workspace)");
}

MoeBufferBytes moe_rows_beyond_plan(const MoeLayerConfig& c, int64_t B, int64_t T, int64_t rows) {
  const int64_t planned = c.planned_expert_rows(tokens_local(c, B * T));
  if (rows <= planned) return {};
  return {device_bytes(act_buffers(c, B, T, rows)) - device_bytes(act_buffers(c, B, T, planned)),
          device_bytes(workspace_buffers(c, B, T, rows)) - device_bytes(workspace_buffers(c, B, T, planned))};
}

}  // namespace mtrain::moe
