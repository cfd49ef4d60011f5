#include "model/transformer_layer.h"

#include <algorithm>
#include <cstring>

#include "common/rng.h"
#include "tensor/activation.h"
#include "tensor/attention.h"
#include "tensor/linear.h"
#include "tensor/norm.h"
#include "tensor/precision.h"
#include "tensor/rope.h"

namespace mtrain::model {

using device::MemCategory;
namespace k = kernels;

// Dropout sites inside a layer; each gets its own mask stream.
enum Site : uint64_t { kSiteAttnDropout = 1, kSiteAttnResidual = 2, kSiteMlpResidual = 3 };

static Tensor act_tensor(device::Device& dev, Shape s, DType t, const std::string& name, bool meta) {
  return Tensor(dev, std::move(s), t, MemCategory::kActivations, name, meta);
}

void allocate_layer_acts(LayerActs& a, const ModelConfig& c, device::Device& dev, bool meta, int slot) {
  const int64_t B = c.micro_batch, T = c.seq_length, N = B * T, C = c.hidden, H = c.heads, G = c.groups, D = c.head_dim;
  const DType t = c.dtype;
  const std::string p = "layer slot " + std::to_string(slot) + " ";
  a.ln1 = act_tensor(dev, {N, C}, t, p + "input norm", meta);
  a.ln1_rstd = act_tensor(dev, {N}, DType::kF32, p + "input norm rstd", meta);
  if (!c.rmsnorm) a.ln1_mean = act_tensor(dev, {N}, DType::kF32, p + "input norm mean", meta);
  a.q = act_tensor(dev, {B, H, T, D}, t, p + "query", meta);
  a.k = act_tensor(dev, {B, G, T, D}, t, p + "key", meta);
  a.v = act_tensor(dev, {B, G, T, D}, t, p + "value", meta);
  a.att = act_tensor(dev, {B, H, T, D}, t, p + "attention output", meta);
  a.merged = act_tensor(dev, {N, H * D}, t, p + "attention output (merged heads)", meta);
  if (c.fusions.flash_attention) {
    a.softmax_stats = act_tensor(dev, {B, H, T}, DType::kF32, p + "attention log-sum-exp", meta);
  } else if (c.recompute != Recompute::kSelective) {
    a.softmax_stats = act_tensor(dev, {B, H, T, T}, t, p + "attention probabilities", meta);
  }
  a.x2 = act_tensor(dev, {N, C}, t, p + "residual after attention", meta);
  a.ln2 = act_tensor(dev, {N, C}, t, p + "pre-mlp norm", meta);
  a.ln2_rstd = act_tensor(dev, {N}, DType::kF32, p + "pre-mlp norm rstd", meta);
  if (!c.rmsnorm) a.ln2_mean = act_tensor(dev, {N}, DType::kF32, p + "pre-mlp norm mean", meta);
  a.fc1 = act_tensor(dev, {N, c.fc1_width()}, t, p + "fc1 output", meta);
  a.act = act_tensor(dev, {N, c.ffn}, t, p + "activation output", meta);
}

static int64_t scratch_floats(const ModelConfig& c) {
  const int64_t B = c.micro_batch, T = c.seq_length, N = B * T, C = c.hidden, H = c.heads, G = c.groups, D = c.head_dim,
                F = c.ffn;
  int64_t s = 0;
  const Fusions& f = c.fusions;
  if (c.rmsnorm && !f.rmsnorm) s = std::max(s, 2 * N * C);
  if (!f.bias_activation) s = std::max(s, 4 * N * F);
  if (!f.bias_dropout) s = std::max(s, 2 * N * C);
  if (c.rope) s = std::max(s, k::rope_scratch_floats(B, H, T, D));
  s = std::max(s, f.flash_attention ? k::attention_flash_scratch_floats(B, H, G, T, D)
                                    : k::attention_unfused_scratch_floats(B, H, G, T, D));
  if (!f.grad_accumulation) {
    s = std::max(s, c.qkv_width() * C);
    s = std::max(s, c.fc1_width() * C);
    s = std::max(s, C * H * D);
  }
  return s;
}

void allocate_workspace(Workspace& w, const ModelConfig& c, device::Device& dev, bool meta) {
  const int64_t B = c.micro_batch, T = c.seq_length, N = B * T, C = c.hidden, H = c.heads, G = c.groups, D = c.head_dim;
  const DType t = c.dtype;
  w.qkv = act_tensor(dev, {N, c.qkv_width()}, t, "qkv projection", meta);
  if (!c.fusions.flash_attention && c.recompute == Recompute::kSelective)
    w.probs = act_tensor(dev, {B, H, T, T}, t, "recomputed attention probabilities", meta);
  w.d_ln = act_tensor(dev, {N, C}, t, "grad of norm output", meta);
  w.d_proj = act_tensor(dev, {N, C}, t, "grad of projection output", meta);
  w.d_merged = act_tensor(dev, {N, H * D}, t, "grad of merged attention", meta);
  w.d_att = act_tensor(dev, {B, H, T, D}, t, "grad of attention output", meta);
  w.d_q = act_tensor(dev, {B, H, T, D}, t, "grad of query", meta);
  w.d_k = act_tensor(dev, {B, G, T, D}, t, "grad of key", meta);
  w.d_v = act_tensor(dev, {B, G, T, D}, t, "grad of value", meta);
  w.d_fc1 = act_tensor(dev, {N, c.fc1_width()}, t, "grad of fc1 output", meta);
  w.d_act = act_tensor(dev, {N, c.ffn}, t, "grad of activation output", meta);
  w.scratch = act_tensor(dev, {std::max<int64_t>(scratch_floats(c), 1)}, DType::kF32, "kernel scratch", meta);
}

namespace {

float* opt(ParamStore& ps, int i) { return i < 0 ? nullptr : ps.param(i); }
float* opt_grad(ParamStore& ps, int i) { return i < 0 ? nullptr : ps.grad(i); }

void round_act(const ModelConfig& c, float* x, int64_t n) {
  if (c.dtype != DType::kF32) k::round_to_dtype(x, n, c.dtype);
}

void norm_forward(const ModelConfig& c, ParamStore& ps, int w, int b, float* out, Tensor& mean, Tensor& rstd,
                  const float* x, int64_t N, float* scratch) {
  if (c.rmsnorm) {
    k::rmsnorm_forward(out, rstd.data(), x, ps.param(w), N, c.hidden, c.norm_eps, c.fusions.rmsnorm, scratch);
  } else {
    k::layernorm_forward(out, mean.data(), rstd.data(), x, ps.param(w), ps.param(b), N, c.hidden, c.norm_eps);
  }
  round_act(c, out, N * c.hidden);
}

void norm_backward(const ModelConfig& c, ParamStore& ps, int w, int b, float* dx, const float* dout, const float* x,
                   Tensor& mean, Tensor& rstd, int64_t N, float* scratch) {
  if (c.rmsnorm) {
    k::rmsnorm_backward(dx, ps.grad(w), dout, x, ps.param(w), rstd.data(), N, c.hidden, c.fusions.rmsnorm, scratch);
  } else {
    k::layernorm_backward(dx, ps.grad(w), ps.grad(b), dout, x, ps.param(w), mean.data(), rstd.data(), N, c.hidden);
  }
}

// linear backward honouring --gradient_accumulation_fusion: fused accumulates
// the weight gradient straight into the fp32 main grad; unfused computes it
// into a temporary and adds it, as an unfused framework would.
void linear_bwd(const ModelConfig& c, ParamStore& ps, int w, int b, float* dinp, const float* dout, const float* inp,
                int64_t N, int64_t C, int64_t OC, float* scratch) {
  if (c.fusions.grad_accumulation) {
    k::linear_backward(dinp, ps.grad(w), opt_grad(ps, b), dout, inp, ps.param(w), N, C, OC);
    return;
  }
  std::memset(scratch, 0, sizeof(float) * OC * C);
  k::linear_backward(dinp, scratch, opt_grad(ps, b), dout, inp, ps.param(w), N, C, OC);
  float* g = ps.grad(w);
  const int64_t n = OC * C;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) g[i] += scratch[i];
}

}  // namespace

void layer_forward(const ModelConfig& c, ParamStore& ps, const LayerParams& lp, LayerActs& a, Workspace& w,
                   const float* x, float* out, const TokenBatch& b, uint64_t seed, bool training) {
  const int64_t B = b.B, T = b.T, N = B * T, C = c.hidden, H = c.heads, G = c.groups, D = c.head_dim;
  float* scratch = w.scratch.data();
  const float p_att = training ? c.attention_dropout : 0.f;
  const float p_hid = training ? c.hidden_dropout : 0.f;

  // Attention block.
  norm_forward(c, ps, lp.ln1_w, lp.ln1_b, a.ln1.data(), a.ln1_mean, a.ln1_rstd, x, N, scratch);
  k::linear_forward(w.qkv.data(), a.ln1.data(), ps.param(lp.qkv_w), opt(ps, lp.qkv_b), N, C, c.qkv_width());
  round_act(c, w.qkv.data(), N * c.qkv_width());
  k::qkv_split_forward(a.q.data(), a.k.data(), a.v.data(), w.qkv.data(), B, T, G, H / G, D);
  if (c.rope) {
    k::rope_forward(a.q.data(), b.positions, B, H, T, D, c.rotary_base, c.fusions.rope, scratch);
    k::rope_forward(a.k.data(), b.positions, B, G, T, D, c.rotary_base, c.fusions.rope, scratch);
    round_act(c, a.q.data(), B * H * T * D);
    round_act(c, a.k.data(), B * G * T * D);
  }
  const uint64_t att_seed = stream_seed(seed, kSiteAttnDropout);
  if (c.fusions.flash_attention) {
    k::attention_flash_forward(a.att.data(), a.softmax_stats.data(), a.q.data(), a.k.data(), a.v.data(), b.doc_ids, B,
                               H, G, T, D, p_att, att_seed, scratch);
  } else {
    float* probs = c.recompute == Recompute::kSelective ? w.probs.data() : a.softmax_stats.data();
    k::attention_unfused_forward(a.att.data(), probs, a.q.data(), a.k.data(), a.v.data(), b.doc_ids, B, H, G, T, D,
                                 p_att, att_seed, c.fusions.masked_softmax, scratch);
  }
  round_act(c, a.att.data(), B * H * T * D);
  k::heads_merge_forward(a.merged.data(), a.att.data(), B, H, T, D);
  k::linear_forward(w.d_proj.data(), a.merged.data(), ps.param(lp.proj_w), nullptr, N, H * D, C);
  round_act(c, w.d_proj.data(), N * C);
  k::bias_dropout_add_forward(a.x2.data(), w.d_proj.data(), opt(ps, lp.proj_b), x, N, C, p_hid,
                              stream_seed(seed, kSiteAttnResidual), c.fusions.bias_dropout, scratch);
  round_act(c, a.x2.data(), N * C);

  // MLP block.
  norm_forward(c, ps, lp.ln2_w, lp.ln2_b, a.ln2.data(), a.ln2_mean, a.ln2_rstd, a.x2.data(), N, scratch);
  k::linear_forward(a.fc1.data(), a.ln2.data(), ps.param(lp.fc1_w), nullptr, N, C, c.fc1_width());
  round_act(c, a.fc1.data(), N * c.fc1_width());
  if (c.swiglu) {
    k::bias_swiglu_forward(a.act.data(), a.fc1.data(), opt(ps, lp.fc1_b), N, c.ffn, c.fusions.bias_activation, scratch);
  } else {
    k::bias_gelu_forward(a.act.data(), a.fc1.data(), opt(ps, lp.fc1_b), N, c.ffn, c.fusions.bias_activation, scratch);
  }
  round_act(c, a.act.data(), N * c.ffn);
  k::linear_forward(w.d_proj.data(), a.act.data(), ps.param(lp.fc2_w), nullptr, N, c.ffn, C);
  round_act(c, w.d_proj.data(), N * C);
  k::bias_dropout_add_forward(out, w.d_proj.data(), opt(ps, lp.fc2_b), a.x2.data(), N, C, p_hid,
                              stream_seed(seed, kSiteMlpResidual), c.fusions.bias_dropout, scratch);
  round_act(c, out, N * C);
}

void layer_backward(const ModelConfig& c, ParamStore& ps, const LayerParams& lp, LayerActs& a, Workspace& w,
                    const float* x, float* dres, const TokenBatch& b, uint64_t seed, bool training) {
  const int64_t B = b.B, T = b.T, N = B * T, C = c.hidden, H = c.heads, G = c.groups, D = c.head_dim;
  float* scratch = w.scratch.data();
  const float p_att = training ? c.attention_dropout : 0.f;
  const float p_hid = training ? c.hidden_dropout : 0.f;

  // MLP block: dres = d(out); the residual passes it through to d(x2) unchanged.
  k::bias_dropout_add_backward(w.d_proj.data(), opt_grad(ps, lp.fc2_b), dres, N, C, p_hid,
                               stream_seed(seed, kSiteMlpResidual));
  linear_bwd(c, ps, lp.fc2_w, -1, w.d_act.data(), w.d_proj.data(), a.act.data(), N, c.ffn, C, scratch);
  round_act(c, w.d_act.data(), N * c.ffn);
  if (c.swiglu) {
    k::bias_swiglu_backward(w.d_fc1.data(), opt_grad(ps, lp.fc1_b), w.d_act.data(), a.fc1.data(), opt(ps, lp.fc1_b), N,
                            c.ffn, c.fusions.bias_activation, scratch);
  } else {
    k::bias_gelu_backward(w.d_fc1.data(), opt_grad(ps, lp.fc1_b), w.d_act.data(), a.fc1.data(), opt(ps, lp.fc1_b), N,
                          c.ffn, c.fusions.bias_activation, scratch);
  }
  round_act(c, w.d_fc1.data(), N * c.fc1_width());
  linear_bwd(c, ps, lp.fc1_w, -1, w.d_ln.data(), w.d_fc1.data(), a.ln2.data(), N, C, c.fc1_width(), scratch);
  round_act(c, w.d_ln.data(), N * C);
  norm_backward(c, ps, lp.ln2_w, lp.ln2_b, dres, w.d_ln.data(), a.x2.data(), a.ln2_mean, a.ln2_rstd, N, scratch);
  round_act(c, dres, N * C);

  // Attention block: dres = d(x2).
  k::bias_dropout_add_backward(w.d_proj.data(), opt_grad(ps, lp.proj_b), dres, N, C, p_hid,
                               stream_seed(seed, kSiteAttnResidual));
  linear_bwd(c, ps, lp.proj_w, -1, w.d_merged.data(), w.d_proj.data(), a.merged.data(), N, H * D, C, scratch);
  round_act(c, w.d_merged.data(), N * H * D);
  k::heads_merge_backward(w.d_att.data(), w.d_merged.data(), B, H, T, D);
  const uint64_t att_seed = stream_seed(seed, kSiteAttnDropout);
  if (c.fusions.flash_attention) {
    k::attention_flash_backward(w.d_q.data(), w.d_k.data(), w.d_v.data(), w.d_att.data(), a.q.data(), a.k.data(),
                                a.v.data(), a.att.data(), a.softmax_stats.data(), b.doc_ids, B, H, G, T, D, p_att,
                                att_seed, scratch);
  } else {
    float* probs = a.softmax_stats.data();
    if (c.recompute == Recompute::kSelective) {
      // Selective recompute: the probabilities were not kept; recompute them
      // (core attention only) into a buffer shared by all layers.
      probs = w.probs.data();
      k::attention_unfused_forward(w.d_q.data(), probs, a.q.data(), a.k.data(), a.v.data(), b.doc_ids, B, H, G, T, D,
                                   p_att, att_seed, c.fusions.masked_softmax, scratch);
      round_act(c, probs, B * H * T * T);
    }
    k::attention_unfused_backward(w.d_q.data(), w.d_k.data(), w.d_v.data(), w.d_att.data(), a.q.data(), a.k.data(),
                                  a.v.data(), probs, b.doc_ids, B, H, G, T, D, p_att, att_seed, scratch);
  }
  if (c.rope) {
    k::rope_backward(w.d_q.data(), b.positions, B, H, T, D, c.rotary_base, c.fusions.rope, scratch);
    k::rope_backward(w.d_k.data(), b.positions, B, G, T, D, c.rotary_base, c.fusions.rope, scratch);
  }
  k::qkv_split_backward(w.qkv.data(), w.d_q.data(), w.d_k.data(), w.d_v.data(), B, T, G, H / G, D);
  round_act(c, w.qkv.data(), N * c.qkv_width());
  linear_bwd(c, ps, lp.qkv_w, lp.qkv_b, w.d_ln.data(), w.qkv.data(), a.ln1.data(), N, C, c.qkv_width(), scratch);
  round_act(c, w.d_ln.data(), N * C);
  norm_backward(c, ps, lp.ln1_w, lp.ln1_b, dres, w.d_ln.data(), x, a.ln1_mean, a.ln1_rstd, N, scratch);
  round_act(c, dres, N * C);
}

}  // namespace mtrain::model
