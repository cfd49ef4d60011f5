// GptModel forward and backward, chunk by chunk: embedding (vocab-parallel)
// -> decoder layers -> final norm -> output layer (column-parallel) ->
// vocab-parallel cross-entropy, and the way back.
#include <algorithm>
#include <cstring>

#include "common/errors.h"
#include "common/rng.h"
#include "model/gpt.h"
#include "profiler/kernel_region.h"
#include "profiler/probe.h"
#include "tensor/activation.h"
#include "tensor/embedding.h"
#include "tensor/norm.h"
#include "tensor/precision.h"

namespace mtrain::model {

namespace k = kernels;

enum : uint64_t { kSiteEmbeddingDropout = 1000 };

namespace {

// Offset of this rank's first token in the micro-batch (sequence parallel).
int64_t token_offset(const ModelConfig& c, int64_t N) { return c.sequence_parallel ? c.tp_rank * (N / c.tp) : 0; }

void round_act(const ModelConfig& c, float* x, int64_t n) {
  if (c.dtype != DType::kF32) k::round_to_dtype(x, n, c.dtype);
}

namespace pf = profiler;

pf::Region module(const char* name, pf::Pass pass, int64_t index = -1) {
  return {pf::Kind::kModule, pass, name, index};
}

// (N_loc, C) hidden states of this rank (a token shard under sequence parallelism).
pf::TensorRef hidden(const ModelConfig& c, const char* role, const float* p, int64_t N) {
  return pf::tensor_2d(role, p, c.tokens_local(N), c.hidden, dtype_name(c.dtype),
                       c.sequence_parallel ? pf::Partition::kTpShard : pf::Partition::kReplicated);
}

}  // namespace

void GptModel::forward(const TokenBatch& b, uint64_t seed, bool training) {
  if (chunks_.size() != 1 || !chunks_[0].spec.pre || !chunks_[0].spec.post)
    throw Error(ExitCode::kInternal, "GptModel::forward needs the whole model on this rank; use forward_chunk");
  forward_chunk(0, 0, b, nullptr, seed, training);
}

void GptModel::backward(const TokenBatch& b, const float* dloss, uint64_t seed, bool training, bool zero_grads) {
  backward_chunk(0, 0, b, nullptr, dloss, seed, training, zero_grads);
}

const float* GptModel::logits() const { return slot_of(static_cast<int>(chunks_.size()) - 1, 0).logits.data(); }

const float* GptModel::chunk_losses(int c, int s) const { return slot_of(c, s).losses.data(); }

const float* GptModel::forward_chunk(int c, int s, const TokenBatch& b, const float* input, uint64_t seed,
                                     bool training) {
  const ModelConfig& cf = config_;
  if (b.B > cf.micro_batch || b.T > cf.seq_local())
    throw Error(ExitCode::kInternal, "micro-batch larger than the model's activation buffers");
  if (cf.cp > 1 && (cp_ == nullptr || b.T % 2 != 0))
    throw Error(ExitCode::kInternal, "context parallelism needs the CP group and two equal chunks per sequence");
  if (cf.sequence_parallel && (b.B * b.T) % cf.tp != 0)
    throw Error(ExitCode::kInternal, "sequence parallelism needs B*T divisible by the tensor-parallel size");
  Chunk& ch = chunks_[c];
  ChunkSlot& sl = slot_of(c, s);
  const int64_t Nl = cf.tokens_local(b.B * b.T), C = cf.hidden;
  const int64_t stride = residual_stride();
  float* res = sl.residuals.data();
  const int64_t N = b.B * b.T;
  if (ch.spec.pre) {
    pf::Scope m(module("embedding", pf::Pass::kForward));
    embed_forward(b, res, seed, training);
    m.end({hidden(cf, "output", res, N)});
  } else if (res) {
    std::memcpy(res, input, sizeof(float) * Nl * C);
  }
  const parallel::TpConfig tp = tp_config();
  for (int64_t i = 0; i < ch.spec.num_layers; ++i) {
    const uint64_t lseed = stream_seed(seed, static_cast<uint64_t>(ch.spec.first_layer + i));
    pf::Scope m(module("decoder.layers", pf::Pass::kForward, ch.spec.first_layer + i),
                {hidden(cf, "input", res + i * stride, N)});
    LayerActs& acts = acts_for(sl, i);
    layer_forward(cf, tp, params_, layers_[ch.layer_index[i]], acts, ws_, res + i * stride, res + (i + 1) * stride, b,
                  lseed, training);
    // Read now: recomputed layers share one activation set.
    if (training && acts.moe)
      record_routing(static_cast<int>(ch.spec.first_layer + i), ch.layer_index[i], acts.moe->route);
    m.end({hidden(cf, "output", res + (i + 1) * stride, N)});
  }
  const float* out = res + ch.spec.num_layers * stride;
  if (!ch.spec.post) return out;
  head_forward(sl, b, out);
  return nullptr;
}

const float* GptModel::backward_chunk(int c, int s, const TokenBatch& b, const float* grad_output, const float* dloss,
                                      uint64_t seed, bool training, bool zero_grads) {
  const ModelConfig& cf = config_;
  Chunk& ch = chunks_[c];
  ChunkSlot& sl = slot_of(c, s);
  const int64_t Nl = cf.tokens_local(b.B * b.T), C = cf.hidden;
  const int64_t stride = residual_stride();
  float* res = sl.residuals.data();
  if (ch.spec.post) {
    head_backward(sl, b, res + ch.spec.num_layers * stride, dloss, zero_grads);
  } else if (dres_.data()) {
    std::memcpy(dres_.data(), grad_output, sizeof(float) * Nl * C);
  }
  const parallel::TpConfig tp = tp_config();
  for (int64_t i = ch.spec.num_layers - 1; i >= 0; --i) {
    const uint64_t lseed = stream_seed(seed, static_cast<uint64_t>(ch.spec.first_layer + i));
    const float* x = res + i * stride;
    const LayerParams& lp = layers_[ch.layer_index[i]];
    pf::Scope m(module("decoder.layers", pf::Pass::kBackward, ch.spec.first_layer + i),
                {hidden(cf, "grad_output", dres_.data(), b.B * b.T)});
    if (cf.layer_recomputed(i)) {
      // Re-run this layer's forward from its saved input into the shared
      // activation set; the output lands in a spare buffer (d_ln is free here).
      layer_forward(cf, tp, params_, lp, recompute_acts_, ws_, x, ws_.d_ln.data(), b, lseed, training);
    }
    if (zero_grads) zero_layer_grads(ch.layer_index[i]);
    layer_backward(cf, tp, params_, lp, acts_for(sl, i), ws_, x, dres_.data(), b, lseed, training);
    m.end({hidden(cf, "grad_input", dres_.data(), b.B * b.T)});
    report_ready(layer_param_span_[ch.layer_index[i]].first, layer_param_span_[ch.layer_index[i]].second);
  }
  if (ch.spec.post) {
    // The final norm and (unless tied to the embedding on this rank) the output layer.
    report_ready(lnf_w_, lnf_b_ >= 0 ? lnf_b_ : lnf_w_);
    if (out_w_ != wte_) report_ready(out_w_, out_w_);
  }
  if (!ch.spec.pre) return dres_.data();
  pf::Scope m(module("embedding", pf::Pass::kBackward), {hidden(cf, "grad_output", dres_.data(), b.B * b.T)});
  embed_backward(b, dres_.data(), seed, training, zero_grads);
  report_ready(wte_, wte_);
  if (wpe_ >= 0) report_ready(wpe_, wpe_);
  return nullptr;
}

void GptModel::embed_forward(const TokenBatch& b, float* out, uint64_t seed, bool training) {
  const ModelConfig& c = config_;
  const int64_t N = b.B * b.T, Nl = c.tokens_local(N), C = c.hidden;
  parallel::vocab_parallel_embedding_forward(tp_config(), out, ws_.full_out.data(), b.tokens, params_.param(wte_), N, C,
                                             c.vocab_start(), c.vocab_local());
  if (wpe_ >= 0 && out) {
    const float* wpe = params_.param(wpe_);
    const int32_t* pos = b.positions + token_offset(c, N);
#pragma omp parallel for schedule(static) if (Nl * C > 16384)
    for (int64_t i = 0; i < Nl; ++i) {
      const float* p = wpe + static_cast<int64_t>(pos[i]) * C;
      for (int64_t j = 0; j < C; ++j) out[i * C + j] += p[j];
    }
  }
  if (training && c.hidden_dropout > 0)
    k::dropout_forward(out, out, Nl, C, c.hidden_dropout, stream_seed(seed, kSiteEmbeddingDropout),
                       c.token_numbering(b.B, b.T));
  round_act(c, out, Nl * C);
}

void GptModel::embed_backward(const TokenBatch& b, float* dout, uint64_t seed, bool training, bool zero_grads) {
  const ModelConfig& c = config_;
  const int64_t N = b.B * b.T, Nl = c.tokens_local(N), C = c.hidden;
  if (training && c.hidden_dropout > 0)
    k::dropout_backward(dout, dout, Nl, C, c.hidden_dropout, stream_seed(seed, kSiteEmbeddingDropout),
                        c.token_numbering(b.B, b.T));
  if (zero_grads) {
    if (wte_ != out_w_) zero_grad(wte_);
    zero_grad(wpe_);
  }
  if (wpe_ >= 0 && dout && params_.info(wpe_).trainable) {
    // Position rows as "tokens" of the position table.
    k::embedding_backward(params_.grad(wpe_), nullptr, dout, b.positions + token_offset(c, N), nullptr, Nl, C);
  }
  parallel::vocab_parallel_embedding_backward(tp_config(), params_.grad(wte_), ws_.full_out.data(), dout, b.tokens, N,
                                              C, c.vocab_start(), c.vocab_local());
}

void GptModel::head_forward(ChunkSlot& s, const TokenBatch& b, const float* h) {
  const ModelConfig& c = config_;
  const int64_t N = b.B * b.T, Nl = c.tokens_local(N), C = c.hidden, V = c.vocab_local();
  float* scratch = ws_.scratch.data();
  {
    pf::Scope m(module("decoder.final_layernorm", pf::Pass::kForward), {hidden(c, "input", h, N)});
    if (c.rmsnorm) {
      k::rmsnorm_forward(s.lnf.data(), s.lnf_rstd.data(), h, params_.param(lnf_w_), Nl, C, c.norm_eps,
                         c.fusions.rmsnorm, scratch);
    } else {
      k::layernorm_forward(s.lnf.data(), s.lnf_mean.data(), s.lnf_rstd.data(), h, params_.param(lnf_w_),
                           params_.param(lnf_b_), Nl, C, c.norm_eps);
    }
    round_act(c, s.lnf.data(), Nl * C);
    m.end({hidden(c, "output", s.lnf.data(), N)});
  }
  const pf::TensorRef logits =
      pf::tensor_2d("output", s.logits.data(), N, V, dtype_name(c.dtype), pf::Partition::kTpShard);
  {
    pf::Scope m(module("output_layer", pf::Pass::kForward), {hidden(c, "input", s.lnf.data(), N)});
    float* x_full = c.sequence_parallel ? ws_.full_in.data() : s.lnf.data();
    parallel::column_parallel_linear_forward(tp_config(), s.logits.data(), x_full, s.lnf.data(), params_.param(out_w_),
                                             nullptr, N, C, V);
    m.end({logits});
  }
  if (!b.targets && !pf::shape_only()) return;  // generation; a dry run's step has no ids but a loss
  const bool fused = c.fusions.cross_entropy;
  pf::TensorRef in = logits;
  in.role = "input";
  pf::Scope op(
      {pf::Kind::kOp, pf::Pass::kForward, "cross_entropy", -1, fused ? "--cross_entropy_loss_fusion" : nullptr}, {in});
  parallel::vocab_parallel_cross_entropy_forward(*tp_, s.losses.data(), fused ? s.ce_stats.data() : nullptr,
                                                 s.logits.data(), b.targets, N, V, c.vocab_start(), c.softmax_vocab(),
                                                 fused, fused ? nullptr : s.ce_scratch.data());
  op.end({pf::tensor_2d("output", s.losses.data(), b.B, b.T, "float32")});
}

void GptModel::head_backward(ChunkSlot& s, const TokenBatch& b, const float* h, const float* dloss, bool zero_grads) {
  const ModelConfig& c = config_;
  const int64_t N = b.B * b.T, Nl = c.tokens_local(N), C = c.hidden, V = c.vocab_local();
  float* scratch = ws_.scratch.data();
  const bool fused = c.fusions.cross_entropy;
  const pf::TensorRef dlogits =
      pf::tensor_2d("grad_input", s.logits.data(), N, V, dtype_name(c.dtype), pf::Partition::kTpShard);
  {
    // d(logits) overwrites the logits in place.
    pf::Scope op(
        {pf::Kind::kOp, pf::Pass::kBackward, "cross_entropy", -1, fused ? "--cross_entropy_loss_fusion" : nullptr},
        {pf::tensor_2d("grad_output", dloss, b.B, b.T, "float32")});
    parallel::vocab_parallel_cross_entropy_backward(
        s.logits.data(), s.logits.data(), fused ? s.ce_stats.data() : nullptr, b.targets, dloss, N, V, c.vocab_start(),
        c.softmax_vocab(), fused, fused ? nullptr : s.ce_scratch.data());
    op.end({dlogits});
  }
  if (zero_grads) zero_grad(out_w_);  // tied: the word embeddings, before the embedding backward adds to them
  {
    pf::TensorRef dout = dlogits;
    dout.role = "grad_output";
    pf::Scope m(module("output_layer", pf::Pass::kBackward), {dout});
    float* x_full = s.lnf.data();
    if (c.sequence_parallel) {
      parallel::sp_all_gather(*tp_, s.lnf.data(), ws_.full_in.data(), Nl * C, tp_config().wire);
      x_full = ws_.full_in.data();
    }
    // The output layer always accumulates its weight gradient in place.
    parallel::column_parallel_linear_backward(tp_config(), dlnf_.data(), ws_.full_out.data(), params_.grad(out_w_),
                                              nullptr, s.logits.data(), x_full, params_.param(out_w_), N, C, V,
                                              /*fused_grad_accumulation=*/true, scratch);
    round_act(c, dlnf_.data(), Nl * C);
    m.end({hidden(c, "grad_input", dlnf_.data(), N)});
  }
  if (dres_.data()) std::memset(dres_.data(), 0, sizeof(float) * Nl * C);
  if (zero_grads) {
    zero_grad(lnf_w_);
    zero_grad(lnf_b_);
  }
  pf::Scope m(module("decoder.final_layernorm", pf::Pass::kBackward), {hidden(c, "grad_output", dlnf_.data(), N)});
  if (c.rmsnorm) {
    k::rmsnorm_backward(dres_.data(), params_.grad(lnf_w_), dlnf_.data(), h, params_.param(lnf_w_), s.lnf_rstd.data(),
                        Nl, C, c.fusions.rmsnorm, scratch);
  } else {
    k::layernorm_backward(dres_.data(), params_.grad(lnf_w_), params_.grad(lnf_b_), dlnf_.data(), h,
                          params_.param(lnf_w_), s.lnf_mean.data(), s.lnf_rstd.data(), Nl, C);
  }
  m.end({hidden(c, "grad_input", dres_.data(), N)});
}

}  // namespace mtrain::model
