// GptModel construction: parameters (with their TP shards), activation slots
// per chunk, and the zeroing bookkeeping of backward(zero_grads). The forward
// and backward passes are in gpt_step.cc.
#include "model/gpt.h"

#include "common/errors.h"
#include "model/lora_layer.h"
#include "model/qk_norm.h"
#include "parallel/local_comm.h"
#include "tensor/precision.h"

namespace mtrain::model {

using device::MemCategory;

GptModel::GptModel(const ModelConfig& config, device::Device& dev, bool meta)
    : GptModel(config, dev, nullptr, meta, {}) {}

GptModel::GptModel(const ModelConfig& config, device::Device& dev, parallel::Comm& tp, bool meta,
                   const std::function<int64_t(ParamStore&)>& padded_numel)
    : GptModel(config, dev, &tp, meta, padded_numel) {}

GptModel::GptModel(const ModelConfig& config, device::Device& dev, parallel::Comm* tp, bool meta,
                   const std::function<int64_t(ParamStore&)>& padded_numel)
    : config_(config), dev_(dev), tp_(tp), router_losses_(static_cast<int>(config.num_layers)) {
  const ModelConfig& c = config_;
  if (!tp_) {
    own_tp_ = std::make_unique<parallel::SelfComm>("tp");
    tp_ = own_tp_.get();
  }
  if (tp_->size() != c.tp || tp_->rank() != c.tp_rank)
    throw Error(ExitCode::kInternal, "GptModel: the TP group does not match ModelConfig tp / tp_rank");
  if (c.moe.ep > 1 && c.moe.num_experts % c.moe.ep != 0)
    throw Error(ExitCode::kInternal, "GptModel: the experts must split over EP");
  if (c.heads % c.tp != 0 || c.groups % c.tp != 0 || c.ffn % c.tp != 0 || c.padded_vocab % c.tp != 0)
    throw Error(ExitCode::kInternal, "GptModel: heads, query groups, FFN and padded vocabulary must split over TP");
  for (const ModelChunk& spec : c.chunk_list()) chunks_.push_back(Chunk{spec, {}, {}});
  count_adapted_linears(c);  // refuses a LoRA target that matches nothing
  build_params();
  mark_trainable(params_, c);
  check_grad_coverage();
  params_.layout();
  params_.finalize(dev, c.dtype, meta, padded_numel ? padded_numel(params_) : 0, c.grad_dtype);
  params_.initialize(c.seed, c.init_std, c.num_layers, c.dtype);
  allocate_chunks(meta);
  init_router_state(meta);
}

GptModel::~GptModel() = default;

void GptModel::set_cp_comm(parallel::Comm& cp, parallel::Comm* tp_cp) {
  if (cp.size() != config_.cp || cp.rank() != config_.cp_rank)
    throw Error(ExitCode::kInternal, "GptModel: the CP group does not match ModelConfig cp / cp_rank");
  if (tp_cp &&
      (tp_cp->size() != config_.tp * config_.cp || tp_cp->rank() != config_.cp_rank * config_.tp + config_.tp_rank))
    throw Error(ExitCode::kInternal, "GptModel: the TP x CP group does not match ModelConfig tp and cp");
  if (config_.moe.num_experts > 0 && config_.cp > 1 && !tp_cp)
    throw Error(ExitCode::kInternal, "GptModel: an MoE model under context parallelism needs the TP x CP group");
  cp_ = &cp;
  tp_cp_ = tp_cp;
}

void GptModel::set_ep_comm(parallel::Comm& ep, parallel::Comm* tp_ep) {
  if (ep.size() != config_.moe.ep || ep.rank() != config_.moe.ep_rank)
    throw Error(ExitCode::kInternal, "GptModel: the EP group does not match ModelConfig moe.ep / moe.ep_rank");
  if (tp_ep && tp_ep->size() != config_.moe.ep * config_.expert_tp())
    throw Error(ExitCode::kInternal, "GptModel: the expert TP x EP group does not match ModelConfig");
  ep_ = &ep;
  tp_ep_ = tp_ep;
}

void GptModel::build_params() {
  const ModelConfig& c = config_;
  const int64_t C = c.hidden, QKV = c.qkv_width(), HD = c.heads * c.head_dim;
  const bool ln = !c.rmsnorm;
  const TpShard rows{TpSplit::kRows, 1, c.tp, c.tp_rank}, cols{TpSplit::kCols, 1, c.tp, c.tp_rank};
  const TpShard gate_up{TpSplit::kRows, c.swiglu ? 2 : 1, c.tp, c.tp_rank};
  // Replicated over TP: counted in the norm once; partial per token shard under SP.
  auto replicated = [&](const std::string& name, Shape shape, bool decay, Init init) {
    const int i = params_.add(name, std::move(shape), decay, init);
    params_.mutable_info(i).counts_in_norm = c.tp_rank == 0;
    params_.mutable_info(i).sequence_parallel_grad = c.sequence_parallel;
    return i;
  };
  auto norm = [&](const std::string& prefix, int& w, int& b) {
    w = replicated(prefix + ".weight", {C}, false, Init::kOnes);
    if (ln) b = replicated(prefix + ".bias", {C}, false, Init::kZeros);
  };
  for (Chunk& ch : chunks_) {
    if (ch.spec.pre) {
      wte_ = params_.add("embedding.word_embeddings.weight", {c.padded_vocab, C}, true, Init::kNormal, rows);
      if (!c.rope) wpe_ = replicated("embedding.position_embeddings.weight", {c.max_positions, C}, true, Init::kNormal);
    }
    for (int64_t i = 0; i < ch.spec.num_layers; ++i) {
      LayerParams lp;
      const int first = static_cast<int>(params_.infos().size());
      const std::string p = "decoder.layers." + std::to_string(ch.spec.first_layer + i) + ".";
      norm(p + "input_layernorm", lp.ln1_w, lp.ln1_b);
      lp.qkv_w = params_.add(p + "self_attention.linear_qkv.weight", {QKV, C}, true, Init::kNormal, rows);
      if (c.add_bias_linear || c.add_qkv_bias)
        lp.qkv_b = params_.add(p + "self_attention.linear_qkv.bias", {QKV}, false, Init::kZeros, rows);
      lp.proj_w = params_.add(p + "self_attention.linear_proj.weight", {C, HD}, true, Init::kScaledNormal, cols);
      if (c.add_bias_linear) lp.proj_b = replicated(p + "self_attention.linear_proj.bias", {C}, false, Init::kZeros);
      add_qk_norm_params(params_, c, p, lp);
      norm(p + "pre_mlp_layernorm", lp.ln2_w, lp.ln2_b);
      if (c.is_moe_layer(ch.spec.first_layer + i)) {
        auto mp = std::make_shared<MoeLayerParams>();
        add_moe_params(params_, c, p, *mp);
        if (c.lora.enabled) add_moe_adapters(params_, c, p, *mp);
        lp.moe = std::move(mp);
      } else {
        lp.fc1_w = params_.add(p + "mlp.linear_fc1.weight", {c.fc1_width(), C}, true, Init::kNormal, gate_up);
        if (c.add_bias_linear)
          lp.fc1_b = params_.add(p + "mlp.linear_fc1.bias", {c.fc1_width()}, false, Init::kZeros, gate_up);
        lp.fc2_w = params_.add(p + "mlp.linear_fc2.weight", {C, c.ffn}, true, Init::kScaledNormal, cols);
        if (c.add_bias_linear) lp.fc2_b = replicated(p + "mlp.linear_fc2.bias", {C}, false, Init::kZeros);
      }
      if (c.lora.enabled) add_layer_adapters(params_, c, p, lp);
      ch.layer_index.push_back(static_cast<int>(layers_.size()));
      layers_.push_back(lp);
      layer_param_span_.emplace_back(first, static_cast<int>(params_.infos().size()) - 1);
    }
    if (ch.spec.post) {
      norm("decoder.final_layernorm", lnf_w_, lnf_b_);
      if (c.untie) {
        out_w_ = params_.add("output_layer.weight", {c.padded_vocab, C}, true, Init::kNormal, rows);
      } else if (wte_ >= 0) {
        out_w_ = wte_;  // tied, on the same rank
      } else {
        // Tied across pipeline stages: the last stage keeps a copy that
        // starts equal to the word embeddings; their gradients are summed.
        out_w_ = params_.add("output_layer.weight", {c.padded_vocab, C}, true, Init::kNormal, rows);
        ParamInfo& info = params_.mutable_info(out_w_);
        info.init_name = "embedding.word_embeddings.weight";
        info.counts_in_norm = false;
        info.shared_embedding = true;
      }
    }
  }
  // Tied, with the output layer on the last pipeline stage: the first stage's
  // word embeddings are the other half of the pair.
  if (!c.untie && wte_ >= 0 && lnf_w_ < 0) params_.mutable_info(wte_).shared_embedding = true;
}

void GptModel::allocate_chunks(bool meta) {
  // Each pool's slots are allocated for its first chunk (named after it): its chunks' activations have one shape.
  const std::vector<int>& pool = config_.chunk_pool;
  if (!pool.empty() && pool.size() != chunks_.size())
    throw Error(ExitCode::kInternal, "GptModel: chunk_pool needs one pool per chunk");
  for (size_t ci = 0; ci < chunks_.size(); ++ci) {
    const int p = pool.empty() ? static_cast<int>(ci) : pool[ci];
    chunks_[ci].pool = p;
    if (p < static_cast<int>(pools_.size())) continue;
    if (p != static_cast<int>(pools_.size())) throw Error(ExitCode::kInternal, "GptModel: pools in order of first use");
    const int n = p < static_cast<int>(config_.chunk_slots.size()) ? config_.chunk_slots[p] : 1;
    if (n < 1) throw Error(ExitCode::kInternal, "GptModel: a chunk needs at least one activation slot");
    pools_.emplace_back(n);
    const int64_t before = dev_.stats().allocated;
    for (int s = 0; s < n; ++s) allocate_slot(pools_[p][s], chunks_[ci], static_cast<int>(ci), s, meta);
    pool_slot_bytes_.push_back((dev_.stats().allocated - before) / n);
  }
  bool any_recomputed = false;
  for (const Chunk& ch : chunks_)
    for (int64_t i = 0; i < ch.spec.num_layers; ++i) any_recomputed |= config_.layer_recomputed(i);
  if (any_recomputed) allocate_layer_acts(recompute_acts_, config_, dev_, meta, -1);
  allocate_workspace(ws_, config_, dev_, meta);
  const int64_t Nl = config_.tokens_local(config_.micro_batch * config_.seq_local()), C = config_.hidden;
  auto act = [&](Shape s, const char* name) {
    return Tensor(dev_, std::move(s), config_.dtype, MemCategory::kActivations, name, meta);
  };
  dres_ = act({Nl, C}, "grad of residual stream");
  dlnf_ = act({Nl, C}, "grad of final norm output");
}

void GptModel::allocate_slot(ChunkSlot& s, const Chunk& ch, int chunk_id, int slot_id, bool meta) {
  const ModelConfig& c = config_;
  const int64_t N = c.micro_batch * c.seq_local(), Nl = c.tokens_local(N), C = c.hidden, V = c.vocab_local();
  const std::string tag = "chunk " + std::to_string(chunk_id) + " slot " + std::to_string(slot_id) + " ";
  auto act = [&](Shape shape, DType t, const std::string& name) {
    return Tensor(dev_, std::move(shape), t, MemCategory::kActivations, tag + name, meta);
  };
  s.residuals = act({ch.spec.num_layers + 1, Nl, C}, c.dtype, "residual stream (per layer input)");
  s.layers.resize(ch.spec.num_layers);
  for (int64_t i = 0; i < ch.spec.num_layers; ++i)
    if (!c.layer_recomputed(i))
      allocate_layer_acts(s.layers[i], c, dev_, meta, static_cast<int>(i), ch.spec.first_layer + i);
  if (!ch.spec.post) return;
  s.lnf = act({Nl, C}, c.dtype, "final norm output");
  s.lnf_rstd = act({Nl}, DType::kF32, "final norm rstd");
  if (!c.rmsnorm) s.lnf_mean = act({Nl}, DType::kF32, "final norm mean");
  // Logits are computed in fp32 for the loss, as Megatron does.
  s.logits = act({N, V}, DType::kF32, "logits");
  if (c.fusions.cross_entropy) {
    s.ce_stats = act({N, 2}, DType::kF32, "cross-entropy statistics");
  } else {
    s.ce_scratch = act({N, V}, DType::kF32, "softmax (unfused cross-entropy)");
  }
  s.losses = act({N}, DType::kF32, "per-token losses");
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

// [begin, end) of the gradients of the trainable parameters among
// first..last, one span per gradient region they fall in (dense, then
// expert-parallel: ParamStore::layout puts those last), each with the
// alignment padding after it (up to the next trainable parameter of the same
// region, or the region's end), so the spans of all parameters tile each
// region; none when all are frozen.
std::vector<std::pair<int64_t, int64_t>> GptModel::grad_spans(int first, int last) const {
  const int n = static_cast<int>(params_.infos().size());
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const bool expert : {false, true}) {
    auto in_region = [&](int i) { return params_.info(i).trainable && params_.info(i).expert_parallel == expert; };
    int lo = first;
    while (lo <= last && !in_region(lo)) ++lo;
    if (lo > last) continue;
    int next = last + 1;
    while (next < n && !in_region(next)) ++next;
    const int64_t region_end = expert ? params_.unpadded_numel() : params_.dense_numel();
    out.emplace_back(params_.info(lo).offset, next < n ? params_.info(next).offset : region_end);
  }
  return out;
}

void GptModel::zero_grads_of(int first, int last) {
  if (first < 0 || params_.grads().is_meta()) return;
  for (const auto& [begin, end] : grad_spans(first, last))
    if (end > begin) zero_floats(params_.grads().data() + begin, end - begin);
}

std::vector<std::pair<int64_t, int64_t>> GptModel::chunk_param_spans(int c) const {
  const Chunk& ch = chunks_[c];
  std::vector<std::pair<int64_t, int64_t>> out;
  auto add = [&](int first, int last) {
    if (first < 0) return;
    for (const auto& span : grad_spans(first, last)) out.push_back(span);
  };
  if (ch.spec.pre) {
    add(wte_, wte_);
    add(wpe_, wpe_);
  }
  for (int l : ch.layer_index) add(layer_param_span_[l].first, layer_param_span_[l].second);
  if (ch.spec.post) {
    add(lnf_w_, lnf_b_ >= 0 ? lnf_b_ : lnf_w_);
    add(out_w_, out_w_);
  }
  return out;
}

void GptModel::report_ready(int first, int last) {
  // bf16 main grads: this micro-batch's accumulation lands in bf16 (Megatron's main_grad of the param dtype).
  const bool round = config_.grad_dtype != DType::kF32 && !params_.grads().is_meta();
  if (first < 0 || (!round && !grad_ready_)) return;
  for (const auto& [begin, end] : grad_spans(first, last)) {
    if (end <= begin) continue;
    if (round) kernels::round_to_dtype(params_.grads().data() + begin, end - begin, config_.grad_dtype);
    if (grad_ready_) grad_ready_(begin, end);
  }
}

AuxLosses GptModel::aux_losses(int c, int s) {
  AuxLosses sum;
  Chunk& ch = chunks_[c];
  for (int64_t i = 0; i < ch.spec.num_layers; ++i) {
    const LayerParams& lp = layers_[ch.layer_index[i]];
    LayerActs& a = acts_for(slot_of(c, s), i);
    if (lp.moe && a.moe) add_aux_losses(sum, a.moe->route, config_.moe.router);
  }
  return sum;
}

}  // namespace mtrain::model
