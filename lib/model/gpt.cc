#include "model/gpt.h"

#include <cstring>

#include "common/errors.h"
#include "common/rng.h"
#include "tensor/activation.h"
#include "tensor/cross_entropy.h"
#include "tensor/embedding.h"
#include "tensor/linear.h"
#include "tensor/norm.h"
#include "tensor/precision.h"

namespace mtrain::model {

using device::MemCategory;
namespace k = kernels;

enum : uint64_t { kSiteEmbeddingDropout = 1000 };

GptModel::GptModel(const ModelConfig& config, device::Device& dev, bool meta) : config_(config), dev_(dev) {
  const ModelConfig& c = config_;
  build_params();
  check_grad_coverage();
  params_.finalize(dev, c.dtype, meta);
  params_.initialize(c.seed, c.init_std, c.num_layers, c.dtype);

  const int64_t N = c.micro_batch * c.seq_length, C = c.hidden, V = c.padded_vocab;
  auto act = [&](Shape s, DType t, const char* name) {
    return Tensor(dev, std::move(s), t, MemCategory::kActivations, name, meta);
  };
  residuals_ = act({c.num_layers + 1, N, C}, c.dtype, "residual stream (per layer input)");
  // Recomputed layers share slot 0; every other layer keeps its own.
  int shared = -1, next = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (c.layer_recomputed(l)) {
      if (shared < 0) shared = next++;
      slot_of_.push_back(shared);
    } else {
      slot_of_.push_back(next++);
    }
  }
  slots_.resize(next);
  for (size_t i = 0; i < slots_.size(); ++i) allocate_layer_acts(slots_[i], c, dev, meta, static_cast<int>(i));
  allocate_workspace(ws_, c, dev, meta);
  lnf_ = act({N, C}, c.dtype, "final norm output");
  lnf_rstd_ = act({N}, DType::kF32, "final norm rstd");
  if (!c.rmsnorm) lnf_mean_ = act({N}, DType::kF32, "final norm mean");
  // Logits are computed in fp32 for the loss, as Megatron does.
  logits_ = act({N, V}, DType::kF32, "logits");
  if (c.fusions.cross_entropy) {
    ce_stats_ = act({N, 2}, DType::kF32, "cross-entropy statistics");
  } else {
    ce_scratch_ = act({N, V}, DType::kF32, "log-softmax (unfused cross-entropy)");
  }
  losses_ = act({N}, DType::kF32, "per-token losses");
  dres_ = act({N, C}, c.dtype, "grad of residual stream");
  dlnf_ = act({N, C}, c.dtype, "grad of final norm output");
}

void GptModel::build_params() {
  const ModelConfig& c = config_;
  const int64_t C = c.hidden, QKV = c.qkv_width(), HD = c.heads * c.head_dim;
  const bool ln = !c.rmsnorm;
  auto norm = [&](const std::string& prefix, int& w, int& b) {
    w = params_.add(prefix + ".weight", {C}, false, Init::kOnes);
    if (ln) b = params_.add(prefix + ".bias", {C}, false, Init::kZeros);
  };
  wte_ = params_.add("embedding.word_embeddings.weight", {c.padded_vocab, C}, true, Init::kNormal);
  if (!c.rope) wpe_ = params_.add("embedding.position_embeddings.weight", {c.max_positions, C}, true, Init::kNormal);
  layers_.resize(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerParams& lp = layers_[i];
    const int first = static_cast<int>(params_.infos().size());
    const std::string p = "decoder.layers." + std::to_string(i) + ".";
    norm(p + "input_layernorm", lp.ln1_w, lp.ln1_b);
    lp.qkv_w = params_.add(p + "self_attention.linear_qkv.weight", {QKV, C}, true, Init::kNormal);
    if (c.add_bias_linear || c.add_qkv_bias)
      lp.qkv_b = params_.add(p + "self_attention.linear_qkv.bias", {QKV}, false, Init::kZeros);
    lp.proj_w = params_.add(p + "self_attention.linear_proj.weight", {C, HD}, true, Init::kScaledNormal);
    if (c.add_bias_linear) lp.proj_b = params_.add(p + "self_attention.linear_proj.bias", {C}, false, Init::kZeros);
    norm(p + "pre_mlp_layernorm", lp.ln2_w, lp.ln2_b);
    lp.fc1_w = params_.add(p + "mlp.linear_fc1.weight", {c.fc1_width(), C}, true, Init::kNormal);
    if (c.add_bias_linear) lp.fc1_b = params_.add(p + "mlp.linear_fc1.bias", {c.fc1_width()}, false, Init::kZeros);
    lp.fc2_w = params_.add(p + "mlp.linear_fc2.weight", {C, c.ffn}, true, Init::kScaledNormal);
    if (c.add_bias_linear) lp.fc2_b = params_.add(p + "mlp.linear_fc2.bias", {C}, false, Init::kZeros);
    layer_param_span_.emplace_back(first, static_cast<int>(params_.infos().size()) - 1);
  }
  norm("decoder.final_layernorm", lnf_w_, lnf_b_);
  out_w_ = c.untie ? params_.add("output_layer.weight", {c.padded_vocab, C}, true, Init::kNormal) : wte_;
}

void GptModel::check_grad_coverage() const {
  std::vector<bool> covered(params_.infos().size(), false);
  for (int i : {wte_, wpe_, lnf_w_, lnf_b_, out_w_})
    if (i >= 0) covered[i] = true;
  for (const auto& [first, last] : layer_param_span_)
    for (int i = first; i <= last; ++i) covered[i] = true;
  for (size_t i = 0; i < covered.size(); ++i)
    if (!covered[i])
      throw Error(ExitCode::kInternal, "GptModel: parameter " + params_.info(static_cast<int>(i)).name +
                                           " is not zeroed by backward(zero_grads = true)");
}

// Parameter i's gradient plus the alignment padding after it (up to the next
// parameter), so the zeroed spans tile the whole flat buffer.
static int64_t grad_span_end(const ParamStore& ps, int i) {
  return i + 1 < static_cast<int>(ps.infos().size()) ? ps.info(i + 1).offset : ps.numel();
}

void GptModel::zero_grad(int param) {
  if (param < 0 || params_.grads().is_meta()) return;
  const int64_t begin = params_.info(param).offset;
  zero_floats(params_.grads().data() + begin, grad_span_end(params_, param) - begin);
}

void GptModel::zero_layer_grads(int64_t layer) {
  if (params_.grads().is_meta()) return;
  const auto [first, last] = layer_param_span_[layer];
  const int64_t begin = params_.info(first).offset;
  zero_floats(params_.grads().data() + begin, grad_span_end(params_, last) - begin);
}

void GptModel::forward(const TokenBatch& b, uint64_t seed, bool training) {
  const ModelConfig& c = config_;
  const int64_t N = b.B * b.T, C = c.hidden, V = c.padded_vocab;
  if (b.B > c.micro_batch || b.T > c.seq_length)
    throw Error(ExitCode::kInternal, "micro-batch larger than the model's activation buffers");
  float* res = residuals_.data();
  const int64_t stride = c.micro_batch * c.seq_length * C;
  k::embedding_forward(res, b.tokens, b.positions, params_.param(wte_), wpe_ < 0 ? nullptr : params_.param(wpe_), N, C);
  if (training && c.hidden_dropout > 0)
    k::dropout_forward(res, res, N * C, c.hidden_dropout, stream_seed(seed, kSiteEmbeddingDropout));
  if (c.dtype != DType::kF32) k::round_to_dtype(res, N * C, c.dtype);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    layer_forward(c, params_, layers_[l], slot_for(l), ws_, res + l * stride, res + (l + 1) * stride, b,
                  stream_seed(seed, static_cast<uint64_t>(l)), training);
  }
  const float* h = res + c.num_layers * stride;
  if (c.rmsnorm) {
    k::rmsnorm_forward(lnf_.data(), lnf_rstd_.data(), h, params_.param(lnf_w_), N, C, c.norm_eps, c.fusions.rmsnorm,
                       ws_.scratch.data());
  } else {
    k::layernorm_forward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), h, params_.param(lnf_w_),
                         params_.param(lnf_b_), N, C, c.norm_eps);
  }
  if (c.dtype != DType::kF32) k::round_to_dtype(lnf_.data(), N * C, c.dtype);
  k::linear_forward(logits_.data(), lnf_.data(), params_.param(out_w_), nullptr, N, C, V);
  if (b.targets) {
    k::cross_entropy_forward(losses_.data(), c.fusions.cross_entropy ? ce_stats_.data() : nullptr, logits_.data(),
                             b.targets, N, V, c.fusions.cross_entropy,
                             c.fusions.cross_entropy ? nullptr : ce_scratch_.data());
  }
}

void GptModel::backward(const TokenBatch& b, const float* dloss, uint64_t seed, bool training, bool zero_grads) {
  const ModelConfig& c = config_;
  const int64_t N = b.B * b.T, C = c.hidden, V = c.padded_vocab;
  const int64_t stride = c.micro_batch * c.seq_length * C;
  float* res = residuals_.data();
  float* scratch = ws_.scratch.data();

  // Loss and LM head; with the fused loss, d(logits) overwrites the logits in place.
  k::cross_entropy_backward(logits_.data(), logits_.data(), c.fusions.cross_entropy ? ce_stats_.data() : nullptr,
                            b.targets, dloss, N, V, c.fusions.cross_entropy,
                            c.fusions.cross_entropy ? nullptr : ce_scratch_.data());
  if (zero_grads) zero_grad(out_w_);  // tied: the word embeddings, before the scatter below adds to them
  k::linear_backward(dlnf_.data(), params_.grad(out_w_), nullptr, logits_.data(), lnf_.data(), params_.param(out_w_), N,
                     C, V);
  if (c.dtype != DType::kF32) k::round_to_dtype(dlnf_.data(), N * C, c.dtype);
  std::memset(dres_.data(), 0, sizeof(float) * N * C);
  const float* h = res + c.num_layers * stride;
  if (zero_grads) {
    zero_grad(lnf_w_);
    zero_grad(lnf_b_);
  }
  if (c.rmsnorm) {
    k::rmsnorm_backward(dres_.data(), params_.grad(lnf_w_), dlnf_.data(), h, params_.param(lnf_w_), lnf_rstd_.data(), N,
                        C, c.fusions.rmsnorm, scratch);
  } else {
    k::layernorm_backward(dres_.data(), params_.grad(lnf_w_), params_.grad(lnf_b_), dlnf_.data(), h,
                          params_.param(lnf_w_), lnf_mean_.data(), lnf_rstd_.data(), N, C);
  }
  for (int64_t l = c.num_layers - 1; l >= 0; --l) {
    const uint64_t lseed = stream_seed(seed, static_cast<uint64_t>(l));
    const float* x = res + l * stride;
    if (c.layer_recomputed(l)) {
      // Re-run this layer's forward from its saved input into the shared slot;
      // the output lands in a spare buffer (d_ln is free at this point).
      layer_forward(c, params_, layers_[l], slot_for(l), ws_, x, ws_.d_ln.data(), b, lseed, training);
    }
    if (zero_grads) zero_layer_grads(l);
    layer_backward(c, params_, layers_[l], slot_for(l), ws_, x, dres_.data(), b, lseed, training);
  }
  if (training && c.hidden_dropout > 0)
    k::dropout_backward(dres_.data(), dres_.data(), N * C, c.hidden_dropout, stream_seed(seed, kSiteEmbeddingDropout));
  if (zero_grads) {
    if (wte_ != out_w_) zero_grad(wte_);
    zero_grad(wpe_);
  }
  k::embedding_backward(params_.grad(wte_), wpe_ < 0 ? nullptr : params_.grad(wpe_), dres_.data(), b.tokens,
                        b.positions, N, C);
}

}  // namespace mtrain::model
