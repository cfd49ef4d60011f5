#include "model/lora_layer.h"

#include <algorithm>

#include "common/errors.h"
#include "common/rng.h"
#include "lora/lora_linear.h"

namespace mtrain::model {

namespace {

constexpr const char* kModule[kNumLinearSites] = {"self_attention.linear_qkv", "self_attention.linear_proj",
                                                  "mlp.linear_fc1", "mlp.linear_fc2"};
bool column_parallel(LinearSite s) { return s == kSiteQkv || s == kSiteFc1; }

// The site's full input width and this rank's output width (column) or full output width (row).
int64_t in_features(const ModelConfig& c, LinearSite s) {
  switch (s) {
    case kSiteProj:
      return c.heads * c.head_dim;
    case kSiteFc2:
      return c.ffn;
    default:
      return c.hidden;
  }
}
int64_t out_features(const ModelConfig& c, LinearSite s) {
  switch (s) {
    case kSiteQkv:
      return c.qkv_width();
    case kSiteFc1:
      return c.fc1_width();
    default:
      return c.hidden;
  }
}

// The module a parameter belongs to: its name without ".weight" / ".bias".
std::string module_of(const std::string& name) { return name.substr(0, name.rfind('.')); }

}  // namespace

AdapterParams add_adapter(ParamStore& ps, const ModelConfig& c, const std::string& module, int64_t in, int64_t out,
                          bool column, int parts, int64_t tp) {
  // Column-parallel: A replicated, B split like W's rows (fc1 per gate/up half);
  // row-parallel: A split like W's columns, B replicated.
  const int64_t rank = tp > 1 ? c.tp_rank : 0;  // expert adapters under ETP 1: whole on every TP rank
  const TpShard a_shard = column ? TpShard{} : TpShard{TpSplit::kCols, 1, tp, rank};
  const TpShard b_shard = column ? TpShard{TpSplit::kRows, parts, tp, rank} : TpShard{};
  AdapterParams ap;
  ap.a = ps.add(module + ".lora_A.weight", {c.lora.rank, in}, true, Init::kKaimingUniform, a_shard);
  ap.b = ps.add(module + ".lora_B.weight", {out, c.lora.rank}, true, Init::kZeros, b_shard);
  for (int p : {ap.a, ap.b}) {
    ParamInfo& info = ps.mutable_info(p);
    info.in_base = false;
    if (info.shard.split == TpSplit::kReplicated) info.counts_in_norm = c.tp_rank == 0;
  }
  return ap;
}

void add_layer_adapters(ParamStore& ps, const ModelConfig& c, const std::string& prefix, LayerParams& lp) {
  for (int i = 0; i < kNumLinearSites; ++i) {
    const auto site = static_cast<LinearSite>(i);
    const std::string module = prefix + kModule[i];
    // An MoE layer's MLP has no dense fc1/fc2: its adapters are the experts' (add_moe_adapters).
    if ((lp.moe && (site == kSiteFc1 || site == kSiteFc2)) || !c.lora.targets(module)) continue;
    const int parts = site == kSiteFc1 && c.swiglu ? 2 : 1;
    const AdapterParams ap =
        add_adapter(ps, c, module, in_features(c, site), out_features(c, site), column_parallel(site), parts, c.tp);
    lp.lora_a[i] = ap.a;
    lp.lora_b[i] = ap.b;
  }
}

void mark_trainable(ParamStore& ps, const ModelConfig& c) {
  if (!c.lora.enabled) return;
  for (int i = 0; i < static_cast<int>(ps.infos().size()); ++i) {
    ParamInfo& p = ps.mutable_info(i);
    if (p.buffer) continue;  // a buffer (the router's expert_bias) is never trained
    const bool bias = p.name.ends_with(".bias");
    // Tied embeddings are one tensor: naming either module trains it (and
    // the last pipeline stage's copy of it).
    const bool tied = !c.untie && (p.name == "embedding.word_embeddings.weight" || p.name == "output_layer.weight");
    const bool saved = tied ? c.lora.saves("embedding.word_embeddings") || c.lora.saves("output_layer")
                            : c.lora.saves(module_of(p.name));
    // The aux-loss-free expert bias is moved by the router, never by the optimizer.
    p.trainable = !p.name.ends_with(".expert_bias") && (!p.in_base || (bias && c.lora.bias_all) || saved);
  }
}

std::vector<std::string> adaptable_linears(const ModelConfig& c) {
  std::vector<std::string> out;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "decoder.layers." + std::to_string(l) + ".";
    const bool moe = c.is_moe_layer(l);
    for (int i = 0; i < kNumLinearSites; ++i)
      if (!moe || i == kSiteQkv || i == kSiteProj) out.push_back(p + kModule[i]);
    if (!moe) continue;
    for (int64_t e = 0; e < c.moe.num_experts; ++e)
      for (const char* fc : {"linear_fc1", "linear_fc2"})
        out.push_back(p + "mlp.experts.local_experts." + std::to_string(e) + "." + fc);
    if (c.moe.shared_ffn > 0)
      for (const char* fc : {"linear_fc1", "linear_fc2"}) out.push_back(p + "mlp.shared_experts." + fc);
  }
  return out;
}

int64_t count_adapted_linears(const ModelConfig& c) {
  if (!c.lora.enabled) return 0;
  int64_t n = 0;
  for (const std::string& m : adaptable_linears(c)) {
    if (!c.lora.targets(m)) continue;
    ++n;
  }
  if (n == 0)
    throw ConfigError(c.lora.target_regex.empty()
                          ? "--target_modules matches no linear layer of this model"
                          : "--target_regex '" + c.lora.target_regex + "' matches no linear layer of this model",
                      "module names look like decoder.layers.0.self_attention.linear_qkv, "
                      "decoder.layers.0.mlp.linear_fc2");
  return n;
}

void allocate_lora_acts(LayerActs& a, const ModelConfig& c, device::Device& dev, bool meta, const std::string& tag) {
  if (!c.lora.enabled) return;
  const int64_t N = c.micro_batch * c.seq_local();
  for (int i = 0; i < kNumLinearSites; ++i)
    a.lora_h[i] = Tensor(dev, {N, c.lora.rank}, DType::kF32, device::MemCategory::kActivations,
                         tag + "LoRA activation of " + kModule[i], meta);
}

void allocate_lora_workspace(Workspace& w, const ModelConfig& c, device::Device& dev, bool meta) {
  if (!c.lora.enabled) return;
  const int64_t N = c.micro_batch * c.seq_local();
  const int64_t in = std::max({c.hidden, c.heads_local() * c.head_dim, c.ffn_local()});
  w.lora_dh = Tensor(dev, {N, c.lora.rank}, DType::kF32, device::MemCategory::kActivations, "LoRA grad", meta);
  w.lora_scratch = Tensor(dev, {N, in}, DType::kF32, device::MemCategory::kActivations, "LoRA scratch", meta);
}

namespace {

lora::AdapterWeights weights(const ModelConfig& c, ParamStore& ps, const LayerParams& lp, LinearSite s, int64_t T,
                             uint64_t seed, bool training) {
  return adapter_weights(c, ps, {lp.lora_a[s], lp.lora_b[s]}, s, T, seed, training);
}

lora::AdapterBuffers buffers(LayerActs& a, Workspace& w, LinearSite s) {
  return {a.lora_h[s].data(), w.lora_dh.data(), w.lora_scratch.data()};
}

}  // namespace

lora::AdapterWeights adapter_weights(const ModelConfig& c, ParamStore& ps, AdapterParams ap, LinearSite s, int64_t T,
                                     uint64_t seed, bool training) {
  lora::AdapterWeights a;
  if (ap.a < 0) return a;
  a.A = ps.param(ap.a);
  a.B = ps.param(ap.b);
  a.dA = ps.grad(ap.a);
  a.dB = ps.grad(ap.b);
  a.rank = c.lora.rank;
  a.scale = c.lora.scaling();
  a.dropout = training ? c.lora.dropout : 0.f;
  a.seed = stream_seed(seed, kSiteLoraDropout + s);
  // Every token of the batch, numbered like the hidden dropout (sequence, position in the whole sequence).
  a.tokens = c.token_numbering(1, T);
  a.tokens.row0 = 0;
  return a;
}

void adapter_forward(const ModelConfig& c, const parallel::TpConfig& tp, ParamStore& ps, const LayerParams& lp,
                     LayerActs& a, Workspace& w, LinearSite site, float* y, const float* x, int64_t N, int64_t T,
                     uint64_t seed, bool training) {
  if (lp.lora_a[site] < 0) return;
  const lora::AdapterWeights aw = weights(c, ps, lp, site, T, seed, training);
  const int64_t in = in_features(c, site), out = out_features(c, site);
  if (column_parallel(site))
    lora::column_adapter_forward(tp, y, buffers(a, w, site), x, aw, N, in, out / c.tp);
  else
    lora::row_adapter_forward(tp, y, buffers(a, w, site), x, aw, N, in / c.tp, out);
}

void adapter_backward(const ModelConfig& c, const parallel::TpConfig& tp, ParamStore& ps, const LayerParams& lp,
                      LayerActs& a, Workspace& w, LinearSite site, float* dx, const float* dy, const float* x,
                      int64_t N, int64_t T, uint64_t seed, bool training) {
  if (lp.lora_a[site] < 0) return;
  const lora::AdapterWeights aw = weights(c, ps, lp, site, T, seed, training);
  const int64_t in = in_features(c, site), out = out_features(c, site);
  if (column_parallel(site))
    lora::column_adapter_backward(tp, dx, buffers(a, w, site), dy, x, aw, N, in, out / c.tp);
  else
    lora::row_adapter_backward(tp, dx, buffers(a, w, site), dy, x, aw, N, in / c.tp, out);
}

}  // namespace mtrain::model
