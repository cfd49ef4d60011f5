// The transformer layer's buffers (transformer_layer.h): what one layer slot
// keeps from forward to backward (LayerActs) and the temporaries all layers
// share (Workspace), sized for the configured micro-batch and accounted as activations.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "model/cp_attention.h"
#include "model/lora_layer.h"
#include "model/qk_norm.h"
#include "model/transformer_layer.h"
#include "model/transformer_layer_internal.h"
#include "tensor/attention.h"
#include "tensor/rope.h"

namespace mtrain::model {

using detail::Dims;
using detail::dims;
using device::MemCategory;
namespace k = kernels;

namespace {

Tensor act_tensor(device::Device& dev, Shape s, DType t, const std::string& name, bool meta) {
  return Tensor(dev, std::move(s), t, MemCategory::kActivations, name, meta);
}

int64_t scratch_floats(const ModelConfig& c) {
  const Dims d = dims(c, c.micro_batch, c.seq_local());
  int64_t s = 0;
  const Fusions& f = c.fusions;
  if (c.rmsnorm && !f.rmsnorm) s = std::max(s, 2 * std::max(d.N, d.Nl) * d.C);
  if (!f.bias_activation) s = std::max(s, 4 * d.N * d.F);
  if (!f.bias_dropout) s = std::max(s, 2 * d.Nl * d.C);
  if (c.rope) s = std::max(s, k::rope_scratch_floats(d.B, d.H, d.T, d.D));
  s = std::max(s, f.flash_attention ? k::attention_flash_scratch_floats(d.B, d.H, d.G, d.T, d.D)
                                    : k::attention_unfused_scratch_floats(d.B, d.H, d.G, d.T, d.D));
  s = std::max(s, cp_scratch_floats(c, d.B, d.H, d.G, d.T, d.D));
  s = std::max(s, qk_norm_scratch_floats(c, d.B, d.H, d.T, d.D));
  if (!f.grad_accumulation) {
    s = std::max(s, d.QKV * d.C);
    s = std::max(s, d.FC1 * d.C);
    s = std::max(s, d.C * d.H * d.D);
    s = std::max(s, d.C * d.F);
  }
  return s;
}

}  // namespace

void allocate_layer_acts(LayerActs& a, const ModelConfig& c, device::Device& dev, bool meta, int slot, int64_t layer) {
  const Dims d = dims(c, c.micro_batch, c.seq_local());
  const DType t = c.dtype;
  // The prefix says what the buffer is for the memory report (plan/activation_buffers.h):
  // a layer's saved activations, or the one recompute buffer all recomputed layers share.
  const std::string p = slot < 0 ? std::string("recompute buffer ") : "layer slot " + std::to_string(slot) + " ";
  a.ln1 = act_tensor(dev, {d.Nl, d.C}, t, p + "input norm", meta);
  a.ln1_rstd = act_tensor(dev, {d.Nl}, DType::kF32, p + "input norm rstd", meta);
  if (!c.rmsnorm) a.ln1_mean = act_tensor(dev, {d.Nl}, DType::kF32, p + "input norm mean", meta);
  a.q = act_tensor(dev, {d.B, d.H, d.T, d.D}, t, p + "query", meta);
  a.k = act_tensor(dev, {d.B, d.G, d.T, d.D}, t, p + "key", meta);
  a.v = act_tensor(dev, {d.B, d.G, d.T, d.D}, t, p + "value", meta);
  a.att = act_tensor(dev, {d.B, d.H, d.T, d.D}, t, p + "attention output", meta);
  a.merged = act_tensor(dev, {d.N, d.H * d.D}, t, p + "attention output (merged heads)", meta);
  if (c.fusions.flash_attention) {
    a.softmax_stats = act_tensor(dev, {d.B, d.H, d.T}, DType::kF32, p + "attention log-sum-exp", meta);
  } else if (c.recompute != Recompute::kSelective) {
    a.softmax_stats = act_tensor(dev, {d.B, d.H, d.T, d.T}, t, p + "attention probabilities", meta);
  }
  a.x2 = act_tensor(dev, {d.Nl, d.C}, t, p + "residual after attention", meta);
  a.ln2 = act_tensor(dev, {d.Nl, d.C}, t, p + "pre-mlp norm", meta);
  a.ln2_rstd = act_tensor(dev, {d.Nl}, DType::kF32, p + "pre-mlp norm rstd", meta);
  if (!c.rmsnorm) a.ln2_mean = act_tensor(dev, {d.Nl}, DType::kF32, p + "pre-mlp norm mean", meta);
  if (layer < 0 || !c.is_moe_layer(layer)) {
    a.fc1 = act_tensor(dev, {d.N, d.FC1}, t, p + "fc1 output", meta);
    a.act = act_tensor(dev, {d.N, d.F}, t, p + "activation output", meta);
  }
  if (c.moe.num_experts > 0 && (layer < 0 || c.is_moe_layer(layer))) {
    a.moe = std::make_unique<moe::MoeActs>();
    moe::allocate_moe_acts(*a.moe, moe_layer_config(c), d.B, d.T, dev, meta, p);
  }
  allocate_qk_norm_acts(a, c, dev, meta, p);
  allocate_lora_acts(a, c, dev, meta, p);
}

void allocate_workspace(Workspace& w, const ModelConfig& c, device::Device& dev, bool meta) {
  const Dims d = dims(c, c.micro_batch, c.seq_local());
  const DType t = c.dtype;
  w.qkv = act_tensor(dev, {d.N, d.QKV}, t, "qkv projection", meta);
  if (!c.fusions.flash_attention && c.recompute == Recompute::kSelective)
    w.probs = act_tensor(dev, {d.B, d.H, d.T, d.T}, t, "recomputed attention probabilities", meta);
  w.d_ln = act_tensor(dev, {d.Nl, d.C}, t, "grad of norm output", meta);
  w.d_proj = act_tensor(dev, {d.Nl, d.C}, t, "grad of projection output", meta);
  w.d_merged = act_tensor(dev, {d.N, d.H * d.D}, t, "grad of merged attention", meta);
  w.d_att = act_tensor(dev, {d.B, d.H, d.T, d.D}, t, "grad of attention output", meta);
  w.d_q = act_tensor(dev, {d.B, d.H, d.T, d.D}, t, "grad of query", meta);
  w.d_k = act_tensor(dev, {d.B, d.G, d.T, d.D}, t, "grad of key", meta);
  w.d_v = act_tensor(dev, {d.B, d.G, d.T, d.D}, t, "grad of value", meta);
  w.d_fc1 = act_tensor(dev, {d.N, d.FC1}, t, "grad of fc1 output", meta);
  w.d_act = act_tensor(dev, {d.N, d.F}, t, "grad of activation output", meta);
  if (c.sequence_parallel) {
    w.full_in = act_tensor(dev, {d.N, d.C}, t, "sequence-parallel gathered input", meta);
    w.full_out = act_tensor(dev, {d.N, d.C}, t, "sequence-parallel reduce-scatter buffer", meta);
  }
  w.scratch = act_tensor(dev, {std::max<int64_t>(scratch_floats(c), 1)}, DType::kF32, "kernel scratch", meta);
  allocate_cp_workspace(w, c, dev, meta);
  allocate_qk_norm_workspace(w, c, dev, meta);
  allocate_lora_workspace(w, c, dev, meta);
  if (c.moe.num_experts > 0) {
    w.moe = std::make_unique<moe::MoeWorkspace>();
    moe::allocate_moe_workspace(*w.moe, moe_layer_config(c), d.B, d.T, dev, meta);
  }
}

}  // namespace mtrain::model
