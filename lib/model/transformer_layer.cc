#include "model/transformer_layer.h"

#include <algorithm>
#include <cstring>

#include "common/rng.h"
#include "model/cp_attention.h"
#include "model/lora_layer.h"
#include "model/qk_norm.h"
#include "model/transformer_layer_internal.h"
#include "profiler/probe.h"
#include "tensor/activation.h"
#include "tensor/attention.h"
#include "tensor/attention_decode.h"
#include "tensor/linear.h"
#include "tensor/norm.h"
#include "tensor/precision.h"
#include "tensor/rope.h"

namespace mtrain::model {

namespace k = kernels;
using detail::Dims;
using detail::dims;

// Dropout sites inside a layer; each gets its own mask stream.
enum Site : uint64_t { kSiteAttnDropout = 1, kSiteAttnResidual = 2, kSiteMlpResidual = 3 };

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

// The column-parallel input: the norm output itself, or under sequence
// parallelism the gathered (N, C) buffer.
float* full_input(const ModelConfig& c, Workspace& w, float* ln) { return c.sequence_parallel ? w.full_in.data() : ln; }

// A row-parallel output gradient of every token: dy itself, or under sequence
// parallelism the buffer the base's backward all-gathered it into.
const float* gathered_grad(const ModelConfig& c, Workspace& w, const float* dy) {
  return c.sequence_parallel ? w.full_out.data() : dy;
}

namespace pf = profiler;
using pf::Kind;
using pf::Pass;

// Probe regions and tensor refs of one layer (profiler/probe.h): modules and
// ops under Megatron-core's names, tensors with their tensor-parallel layout.
struct Probe {
  const ModelConfig& c;
  const Dims& d;
  Pass pass;
  const char* dt = dtype_name(c.dtype);  // looked up once per layer pass, not per tensor ref
  pf::Region module(const char* name) const { return {Kind::kModule, pass, name}; }
  // An op that a fusion flag may merge: `flag` names it when the fused path runs.
  pf::Region op(const char* name, bool fused = false, const char* flag = nullptr) const {
    return {Kind::kOp, pass, name, -1, fused ? flag : nullptr};
  }
  // (N_loc, C): token rows, a token shard under sequence parallelism.
  pf::TensorRef tokens(const char* role, const float* p) const {
    return pf::tensor_2d(role, p, d.Nl, d.C, dt,
                         c.sequence_parallel ? pf::Partition::kTpShard : pf::Partition::kReplicated);
  }
  // (N, width): this rank's columns of a column-parallel output.
  pf::TensorRef cols(const char* role, const float* p, int64_t width) const {
    return pf::tensor_2d(role, p, d.N, width, dt, pf::Partition::kTpShard);
  }
  // (B, heads, T, D): this rank's heads.
  pf::TensorRef heads(const char* role, const float* p, int64_t heads) const {
    return pf::tensor_4d(role, p, d.B, heads, d.T, d.D, dt, pf::Partition::kTpShard);
  }
};

}  // namespace

// The dense MLP: fc1 column-parallel, activation local, fc2 row-parallel; output in w.d_proj (N_loc, C).
static void dense_mlp_forward(const ModelConfig& c, const parallel::TpConfig& tp, ParamStore& ps, const LayerParams& lp,
                              LayerActs& a, Workspace& w, const Dims& d, uint64_t seed, bool training) {
  const Probe pr{c, d, Pass::kForward};
  const Fusions& f = c.fusions;
  float* scratch = w.scratch.data();
  {
    pf::Scope m(pr.module("linear_fc1"), {pr.tokens("input", a.ln2.data())});
    parallel::column_parallel_linear_forward(tp, a.fc1.data(), full_input(c, w, a.ln2.data()), a.ln2.data(),
                                             ps.param(lp.fc1_w), nullptr, d.N, d.C, d.FC1);
    adapter_forward(c, tp, ps, lp, a, w, kSiteFc1, a.fc1.data(), full_input(c, w, a.ln2.data()), d.N, d.T, seed,
                    training);
    round_act(c, a.fc1.data(), d.N * d.FC1);
    m.end({pr.cols("output", a.fc1.data(), d.FC1)});
  }
  {
    pf::Scope op(pr.op("activation_func", f.bias_activation, c.swiglu ? "--bias_swiglu_fusion" : "--bias_gelu_fusion"),
                 {pr.cols("input", a.fc1.data(), d.FC1)});
    if (c.swiglu) {
      k::bias_swiglu_forward(a.act.data(), a.fc1.data(), opt(ps, lp.fc1_b), d.N, d.F, f.bias_activation, scratch);
    } else {
      k::bias_gelu_forward(a.act.data(), a.fc1.data(), opt(ps, lp.fc1_b), d.N, d.F, f.bias_activation, scratch);
    }
    round_act(c, a.act.data(), d.N * d.F);
    op.end({pr.cols("output", a.act.data(), d.F)});
  }
  {
    pf::Scope m(pr.module("linear_fc2"), {pr.cols("input", a.act.data(), d.F)});
    parallel::row_parallel_linear_forward(tp, w.d_proj.data(), w.full_out.data(), a.act.data(), ps.param(lp.fc2_w), d.N,
                                          d.F, d.C);
    adapter_forward(c, tp, ps, lp, a, w, kSiteFc2, w.d_proj.data(), a.act.data(), d.N, d.T, seed, training);
    round_act(c, w.d_proj.data(), d.Nl * d.C);
    m.end({pr.tokens("output", w.d_proj.data())});
  }
}

void layer_forward(const ModelConfig& c, const parallel::TpConfig& tp, ParamStore& ps, const LayerParams& lp,
                   LayerActs& a, Workspace& w, const float* x, float* out, const TokenBatch& b, uint64_t seed,
                   bool training, const KvLayerCache* kv) {
  const Dims d = dims(c, b.B, b.T);
  const Probe pr{c, d, Pass::kForward};
  const Fusions& f = c.fusions;
  float* scratch = w.scratch.data();
  const float p_att = training ? c.attention_dropout : 0.f;
  const float p_hid = training ? c.hidden_dropout : 0.f;
  const TokenNumbering moff = c.token_numbering(d.B, d.T);
  const int64_t h0 = c.tp_rank * d.H;

  // Attention block: qkv column-parallel, heads local, proj row-parallel.
  {
    pf::Scope m(pr.module("input_layernorm"), {pr.tokens("input", x)});
    norm_forward(c, ps, lp.ln1_w, lp.ln1_b, a.ln1.data(), a.ln1_mean, a.ln1_rstd, x, d.Nl, scratch);
    m.end({pr.tokens("output", a.ln1.data())});
  }
  pf::Scope attn(pr.module("self_attention"), {pr.tokens("input", a.ln1.data())});
  {
    pf::Scope m(pr.module("linear_qkv"), {pr.tokens("input", a.ln1.data())});
    parallel::column_parallel_linear_forward(tp, w.qkv.data(), full_input(c, w, a.ln1.data()), a.ln1.data(),
                                             ps.param(lp.qkv_w), opt(ps, lp.qkv_b), d.N, d.C, d.QKV);
    adapter_forward(c, tp, ps, lp, a, w, kSiteQkv, w.qkv.data(), full_input(c, w, a.ln1.data()), d.N, d.T, seed,
                    training);
    round_act(c, w.qkv.data(), d.N * d.QKV);
    m.end({pr.cols("output", w.qkv.data(), d.QKV)});
  }
  k::qkv_split_forward(qk_split_query(c, a), qk_split_key(c, a), a.v.data(), w.qkv.data(), d.B, d.T, d.G, d.H / d.G,
                       d.D);
  qk_norm_forward(c, ps, lp, a, d.B, d.T, scratch);
  if (c.rope) {
    pf::Scope op(pr.op("apply_rotary_pos_emb", f.rope, "--apply_rope_fusion"),
                 {pr.heads("query", a.q.data(), d.H), pr.heads("key", a.k.data(), d.G)});
    k::rope_forward(a.q.data(), b.positions, d.B, d.H, d.T, d.D, c.rotary_base, f.rope, scratch);
    k::rope_forward(a.k.data(), b.positions, d.B, d.G, d.T, d.D, c.rotary_base, f.rope, scratch);
    round_act(c, a.q.data(), d.B * d.H * d.T * d.D);
    round_act(c, a.k.data(), d.B * d.G * d.T * d.D);
    op.end({pr.heads("query", a.q.data(), d.H), pr.heads("key", a.k.data(), d.G)});
  }
  const uint64_t att_seed = stream_seed(seed, kSiteAttnDropout);
  {
    pf::Scope m(pr.module("core_attention"), {pr.heads("query", a.q.data(), d.H), pr.heads("key", a.k.data(), d.G),
                                              pr.heads("value", a.v.data(), d.G)});
    if (kv) {  // inference: B = 1, the cache holds kv->past earlier tokens
      k::attention_decode_forward(a.att.data(), a.q.data(), a.k.data(), a.v.data(), kv->k, kv->v, d.H, d.G, d.T,
                                  kv->past, kv->capacity, d.D, kv->scores);
    } else if (context_parallel(tp)) {
      cp_attention_forward(c, tp, a, w, b, d.H, d.G, d.D, p_att, att_seed);
    } else if (f.flash_attention) {
      k::attention_flash_forward(a.att.data(), a.softmax_stats.data(), a.q.data(), a.k.data(), a.v.data(), b.doc_ids,
                                 d.B, d.H, d.G, d.T, d.D, p_att, att_seed, scratch, h0, c.heads, c.seq_length);
    } else {
      float* probs = c.recompute == Recompute::kSelective ? w.probs.data() : a.softmax_stats.data();
      k::attention_unfused_forward(a.att.data(), probs, a.q.data(), a.k.data(), a.v.data(), b.doc_ids, d.B, d.H, d.G,
                                   d.T, d.D, p_att, att_seed, f.masked_softmax, scratch, h0, c.heads, c.seq_length);
    }
    round_act(c, a.att.data(), d.B * d.H * d.T * d.D);
    m.end({pr.heads("output", a.att.data(), d.H)});
  }
  k::heads_merge_forward(a.merged.data(), a.att.data(), d.B, d.H, d.T, d.D);
  {
    pf::Scope m(pr.module("linear_proj"), {pr.cols("input", a.merged.data(), d.H * d.D)});
    parallel::row_parallel_linear_forward(tp, w.d_proj.data(), w.full_out.data(), a.merged.data(), ps.param(lp.proj_w),
                                          d.N, d.H * d.D, d.C);
    adapter_forward(c, tp, ps, lp, a, w, kSiteProj, w.d_proj.data(), a.merged.data(), d.N, d.T, seed, training);
    round_act(c, w.d_proj.data(), d.Nl * d.C);
    m.end({pr.tokens("output", w.d_proj.data())});
  }
  attn.end({pr.tokens("output", w.d_proj.data())});
  {
    pf::Scope op(pr.op("self_attn_bda", f.bias_dropout, "--bias_dropout_fusion"),
                 {pr.tokens("input", w.d_proj.data()), pr.tokens("residual", x)});
    k::bias_dropout_add_forward(a.x2.data(), w.d_proj.data(), opt(ps, lp.proj_b), x, d.Nl, d.C, p_hid,
                                stream_seed(seed, kSiteAttnResidual), f.bias_dropout, scratch, moff);
    round_act(c, a.x2.data(), d.Nl * d.C);
    op.end({pr.tokens("output", a.x2.data())});
  }

  // MLP block: fc1 column-parallel, activation local, fc2 row-parallel.
  {
    pf::Scope m(pr.module("pre_mlp_layernorm"), {pr.tokens("input", a.x2.data())});
    norm_forward(c, ps, lp.ln2_w, lp.ln2_b, a.ln2.data(), a.ln2_mean, a.ln2_rstd, a.x2.data(), d.Nl, scratch);
    m.end({pr.tokens("output", a.ln2.data())});
  }
  pf::Scope mlp(pr.module("mlp"), {pr.tokens("input", a.ln2.data())});
  if (lp.moe) {
    moe::moe_forward(moe_layer_config(c), tp, moe_weights(c, ps, *lp.moe, d.T, seed, training), *a.moe, *w.moe,
                     moe::SpBuffers{w.full_in.data(), w.full_out.data()}, w.d_proj.data(), a.ln2.data(), d.B, d.T,
                     training);
  } else {
    dense_mlp_forward(c, tp, ps, lp, a, w, d, seed, training);
  }
  mlp.end({pr.tokens("output", w.d_proj.data())});
  pf::Scope op(pr.op("mlp_bda", f.bias_dropout, "--bias_dropout_fusion"),
               {pr.tokens("input", w.d_proj.data()), pr.tokens("residual", a.x2.data())});
  k::bias_dropout_add_forward(out, w.d_proj.data(), opt(ps, lp.fc2_b), a.x2.data(), d.Nl, d.C, p_hid,
                              stream_seed(seed, kSiteMlpResidual), f.bias_dropout, scratch, moff);
  round_act(c, out, d.Nl * d.C);
  op.end({pr.tokens("output", out)});
}

// The dense MLP's backward: d(output) in w.d_proj -> d(norm output) in w.d_ln.
static void dense_mlp_backward(const ModelConfig& c, const parallel::TpConfig& tp, ParamStore& ps,
                               const LayerParams& lp, LayerActs& a, Workspace& w, const Dims& d, uint64_t seed,
                               bool training) {
  const Probe pr{c, d, Pass::kBackward};
  float* scratch = w.scratch.data();
  const bool ga = c.fusions.grad_accumulation;
  {
    pf::Scope m(pr.module("linear_fc2"), {pr.tokens("grad_output", w.d_proj.data())});
    parallel::row_parallel_linear_backward(tp, w.d_act.data(), ps.grad(lp.fc2_w), w.full_out.data(), w.d_proj.data(),
                                           a.act.data(), ps.param(lp.fc2_w), d.N, d.F, d.C, ga, scratch);
    adapter_backward(c, tp, ps, lp, a, w, kSiteFc2, w.d_act.data(), gathered_grad(c, w, w.d_proj.data()), a.act.data(),
                     d.N, d.T, seed, training);
    round_act(c, w.d_act.data(), d.N * d.F);
    m.end({pr.cols("grad_input", w.d_act.data(), d.F)});
  }
  {
    pf::Scope op(
        pr.op("activation_func", c.fusions.bias_activation, c.swiglu ? "--bias_swiglu_fusion" : "--bias_gelu_fusion"),
        {pr.cols("grad_output", w.d_act.data(), d.F)});
    if (c.swiglu) {
      k::bias_swiglu_backward(w.d_fc1.data(), opt_grad(ps, lp.fc1_b), w.d_act.data(), a.fc1.data(), opt(ps, lp.fc1_b),
                              d.N, d.F, c.fusions.bias_activation, scratch);
    } else {
      k::bias_gelu_backward(w.d_fc1.data(), opt_grad(ps, lp.fc1_b), w.d_act.data(), a.fc1.data(), opt(ps, lp.fc1_b),
                            d.N, d.F, c.fusions.bias_activation, scratch);
    }
    round_act(c, w.d_fc1.data(), d.N * d.FC1);
    op.end({pr.cols("grad_input", w.d_fc1.data(), d.FC1)});
  }
  {
    pf::Scope m(pr.module("linear_fc1"), {pr.cols("grad_output", w.d_fc1.data(), d.FC1)});
    if (c.sequence_parallel) parallel::sp_all_gather(*tp.tp, a.ln2.data(), w.full_in.data(), d.Nl * d.C, tp.wire);
    parallel::column_parallel_linear_backward(tp, w.d_ln.data(), w.full_out.data(), ps.grad(lp.fc1_w), nullptr,
                                              w.d_fc1.data(), full_input(c, w, a.ln2.data()), ps.param(lp.fc1_w), d.N,
                                              d.C, d.FC1, ga, scratch);
    adapter_backward(c, tp, ps, lp, a, w, kSiteFc1, w.d_ln.data(), w.d_fc1.data(), full_input(c, w, a.ln2.data()), d.N,
                     d.T, seed, training);
    round_act(c, w.d_ln.data(), d.Nl * d.C);
    m.end({pr.tokens("grad_input", w.d_ln.data())});
  }
}

static void mlp_backward(const ModelConfig& c, const parallel::TpConfig& tp, ParamStore& ps, const LayerParams& lp,
                         LayerActs& a, Workspace& w, float* dres, const Dims& d, uint64_t seed, bool training,
                         float aux_loss_scale) {
  const Probe pr{c, d, Pass::kBackward};
  float* scratch = w.scratch.data();
  const float p_hid = training ? c.hidden_dropout : 0.f;
  // dres = d(out); the residual passes it through to d(x2) unchanged.
  {
    pf::Scope op(pr.op("mlp_bda", c.fusions.bias_dropout, "--bias_dropout_fusion"), {pr.tokens("grad_output", dres)});
    k::bias_dropout_add_backward(w.d_proj.data(), opt_grad(ps, lp.fc2_b), dres, d.Nl, d.C, p_hid,
                                 stream_seed(seed, kSiteMlpResidual), c.token_numbering(d.B, d.T));
    op.end({pr.tokens("grad_input", w.d_proj.data())});
  }
  pf::Scope mlp(pr.module("mlp"), {pr.tokens("grad_output", w.d_proj.data())});
  if (lp.moe) {
    moe::moe_backward(moe_layer_config(c), tp, moe_weights(c, ps, *lp.moe, d.T, seed, training), *a.moe, *w.moe,
                      moe::SpBuffers{w.full_in.data(), w.full_out.data()}, w.d_ln.data(), w.d_proj.data(), a.ln2.data(),
                      d.B, d.T, aux_loss_scale);
  } else {
    dense_mlp_backward(c, tp, ps, lp, a, w, d, seed, training);
  }
  mlp.end({pr.tokens("grad_input", w.d_ln.data())});
  pf::Scope m(pr.module("pre_mlp_layernorm"), {pr.tokens("grad_output", w.d_ln.data())});
  norm_backward(c, ps, lp.ln2_w, lp.ln2_b, dres, w.d_ln.data(), a.x2.data(), a.ln2_mean, a.ln2_rstd, d.Nl, scratch);
  round_act(c, dres, d.Nl * d.C);
  m.end({pr.tokens("grad_input", dres)});
}

void layer_backward(const ModelConfig& c, const parallel::TpConfig& tp, ParamStore& ps, const LayerParams& lp,
                    LayerActs& a, Workspace& w, const float* x, float* dres, const TokenBatch& b, uint64_t seed,
                    bool training) {
  const Dims d = dims(c, b.B, b.T);
  const Probe pr{c, d, Pass::kBackward};
  const Fusions& f = c.fusions;
  float* scratch = w.scratch.data();
  const float p_att = training ? c.attention_dropout : 0.f;
  const float p_hid = training ? c.hidden_dropout : 0.f;
  const bool ga = f.grad_accumulation;
  const int64_t h0 = c.tp_rank * d.H;
  mlp_backward(c, tp, ps, lp, a, w, dres, d, seed, training, b.aux_loss_scale);

  // Attention block: dres = d(x2).
  {
    pf::Scope op(pr.op("self_attn_bda", f.bias_dropout, "--bias_dropout_fusion"), {pr.tokens("grad_output", dres)});
    k::bias_dropout_add_backward(w.d_proj.data(), opt_grad(ps, lp.proj_b), dres, d.Nl, d.C, p_hid,
                                 stream_seed(seed, kSiteAttnResidual), c.token_numbering(d.B, d.T));
    op.end({pr.tokens("grad_input", w.d_proj.data())});
  }
  pf::Scope attn(pr.module("self_attention"), {pr.tokens("grad_output", w.d_proj.data())});
  {
    pf::Scope m(pr.module("linear_proj"), {pr.tokens("grad_output", w.d_proj.data())});
    parallel::row_parallel_linear_backward(tp, w.d_merged.data(), ps.grad(lp.proj_w), w.full_out.data(),
                                           w.d_proj.data(), a.merged.data(), ps.param(lp.proj_w), d.N, d.H * d.D, d.C,
                                           ga, scratch);
    adapter_backward(c, tp, ps, lp, a, w, kSiteProj, w.d_merged.data(), gathered_grad(c, w, w.d_proj.data()),
                     a.merged.data(), d.N, d.T, seed, training);
    round_act(c, w.d_merged.data(), d.N * d.H * d.D);
    m.end({pr.cols("grad_input", w.d_merged.data(), d.H * d.D)});
  }
  k::heads_merge_backward(w.d_att.data(), w.d_merged.data(), d.B, d.H, d.T, d.D);
  const uint64_t att_seed = stream_seed(seed, kSiteAttnDropout);
  {
    pf::Scope m(pr.module("core_attention"), {pr.heads("grad_output", w.d_att.data(), d.H)});
    if (context_parallel(tp)) {
      cp_attention_backward(c, tp, a, w, b, d.H, d.G, d.D, p_att, att_seed);
    } else if (f.flash_attention) {
      k::attention_flash_backward(w.d_q.data(), w.d_k.data(), w.d_v.data(), w.d_att.data(), a.q.data(), a.k.data(),
                                  a.v.data(), a.att.data(), a.softmax_stats.data(), b.doc_ids, d.B, d.H, d.G, d.T, d.D,
                                  p_att, att_seed, scratch, h0, c.heads, c.seq_length);
    } else {
      float* probs = a.softmax_stats.data();
      if (c.recompute == Recompute::kSelective) {
        // Selective recompute: the probabilities were not kept; recompute them
        // (core attention only) into a buffer shared by all layers.
        probs = w.probs.data();
        k::attention_unfused_forward(w.d_q.data(), probs, a.q.data(), a.k.data(), a.v.data(), b.doc_ids, d.B, d.H, d.G,
                                     d.T, d.D, p_att, att_seed, f.masked_softmax, scratch, h0, c.heads, c.seq_length);
        round_act(c, probs, d.B * d.H * d.T * d.T);
      }
      k::attention_unfused_backward(w.d_q.data(), w.d_k.data(), w.d_v.data(), w.d_att.data(), a.q.data(), a.k.data(),
                                    a.v.data(), probs, b.doc_ids, d.B, d.H, d.G, d.T, d.D, p_att, att_seed, scratch, h0,
                                    c.heads, c.seq_length);
    }
    m.end({pr.heads("grad_query", w.d_q.data(), d.H), pr.heads("grad_key", w.d_k.data(), d.G),
           pr.heads("grad_value", w.d_v.data(), d.G)});
  }
  if (c.rope) {
    pf::Scope op(pr.op("apply_rotary_pos_emb", f.rope, "--apply_rope_fusion"),
                 {pr.heads("grad_query", w.d_q.data(), d.H), pr.heads("grad_key", w.d_k.data(), d.G)});
    k::rope_backward(w.d_q.data(), b.positions, d.B, d.H, d.T, d.D, c.rotary_base, f.rope, scratch);
    k::rope_backward(w.d_k.data(), b.positions, d.B, d.G, d.T, d.D, c.rotary_base, f.rope, scratch);
    op.end({pr.heads("grad_query", w.d_q.data(), d.H), pr.heads("grad_key", w.d_k.data(), d.G)});
  }
  const QkGrads dqk = qk_norm_backward(c, ps, lp, a, w, d.B, d.T, scratch);
  k::qkv_split_backward(w.qkv.data(), dqk.dq, dqk.dk, w.d_v.data(), d.B, d.T, d.G, d.H / d.G, d.D);
  round_act(c, w.qkv.data(), d.N * d.QKV);
  {
    pf::Scope m(pr.module("linear_qkv"), {pr.cols("grad_output", w.qkv.data(), d.QKV)});
    if (c.sequence_parallel) parallel::sp_all_gather(*tp.tp, a.ln1.data(), w.full_in.data(), d.Nl * d.C, tp.wire);
    parallel::column_parallel_linear_backward(tp, w.d_ln.data(), w.full_out.data(), ps.grad(lp.qkv_w),
                                              opt_grad(ps, lp.qkv_b), w.qkv.data(), full_input(c, w, a.ln1.data()),
                                              ps.param(lp.qkv_w), d.N, d.C, d.QKV, ga, scratch);
    adapter_backward(c, tp, ps, lp, a, w, kSiteQkv, w.d_ln.data(), w.qkv.data(), full_input(c, w, a.ln1.data()), d.N,
                     d.T, seed, training);
    round_act(c, w.d_ln.data(), d.Nl * d.C);
    m.end({pr.tokens("grad_input", w.d_ln.data())});
  }
  attn.end({pr.tokens("grad_input", w.d_ln.data())});
  pf::Scope m(pr.module("input_layernorm"), {pr.tokens("grad_output", w.d_ln.data())});
  norm_backward(c, ps, lp.ln1_w, lp.ln1_b, dres, w.d_ln.data(), x, a.ln1_mean, a.ln1_rstd, d.Nl, scratch);
  round_act(c, dres, d.Nl * d.C);
  m.end({pr.tokens("grad_input", dres)});
}

}  // namespace mtrain::model
