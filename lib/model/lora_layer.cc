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

// Adapter dropout streams, apart from the layer's other dropout sites.
constexpr uint64_t kSiteLoraDropout = 16;

}  // namespace

void add_layer_adapters(ParamStore& ps, const ModelConfig& c, const std::string& prefix, LayerParams& lp) {
  const int64_t r = c.lora.rank;
  for (int i = 0; i < kNumLinearSites; ++i) {
    const auto site = static_cast<LinearSite>(i);
    const std::string module = prefix + kModule[i];
    if (!c.lora.targets(module)) continue;
    const int64_t in = in_features(c, site), out = out_features(c, site);
    // Column-parallel: A replicated, B split like W's rows (fc1 per gate/up half);
    // row-parallel: A split like W's columns, B replicated.
    const int parts = site == kSiteFc1 && c.swiglu ? 2 : 1;
    const TpShard a_shard = column_parallel(site) ? TpShard{} : TpShard{TpSplit::kCols, 1, c.tp, c.tp_rank};
    const TpShard b_shard = column_parallel(site) ? TpShard{TpSplit::kRows, parts, c.tp, c.tp_rank} : TpShard{};
    lp.lora_a[i] = ps.add(module + ".lora_A.weight", {r, in}, true, Init::kKaimingUniform, a_shard);
    lp.lora_b[i] = ps.add(module + ".lora_B.weight", {out, r}, true, Init::kZeros, b_shard);
    for (int p : {lp.lora_a[i], lp.lora_b[i]}) {
      ParamInfo& info = ps.mutable_info(p);
      info.in_base = false;
      if (info.shard.split == TpSplit::kReplicated) info.counts_in_norm = c.tp_rank == 0;
    }
  }
}

void mark_trainable(ParamStore& ps, const ModelConfig& c) {
  if (!c.lora.enabled) return;
  for (int i = 0; i < static_cast<int>(ps.infos().size()); ++i) {
    ParamInfo& p = ps.mutable_info(i);
    const bool bias = p.name.ends_with(".bias");
    // Tied embeddings are one tensor: naming either module trains it (and
    // the last pipeline stage's copy of it).
    const bool tied = !c.untie && (p.name == "embedding.word_embeddings.weight" || p.name == "output_layer.weight");
    const bool saved = tied ? c.lora.saves("embedding.word_embeddings") || c.lora.saves("output_layer")
                            : c.lora.saves(module_of(p.name));
    p.trainable = !p.in_base || (bias && c.lora.bias_all) || saved;
  }
}

int64_t count_adapted_linears(const ModelConfig& c) {
  if (!c.lora.enabled) return 0;
  int64_t n = 0;
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (const char* m : kModule) n += c.lora.targets("decoder.layers." + std::to_string(l) + "." + m);
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
  lora::AdapterWeights a;
  a.A = ps.param(lp.lora_a[s]);
  a.B = ps.param(lp.lora_b[s]);
  a.dA = ps.grad(lp.lora_a[s]);
  a.dB = ps.grad(lp.lora_b[s]);
  a.rank = c.lora.rank;
  a.scale = c.lora.scaling();
  a.dropout = training ? c.lora.dropout : 0.f;
  a.seed = stream_seed(seed, kSiteLoraDropout + s);
  // Every token of the batch, numbered like the hidden dropout (sequence, position in the whole sequence).
  a.tokens = c.token_numbering(1, T);
  a.tokens.row0 = 0;
  return a;
}

lora::AdapterBuffers buffers(LayerActs& a, Workspace& w, LinearSite s) {
  return {a.lora_h[s].data(), w.lora_dh.data(), w.lora_scratch.data()};
}

}  // namespace

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
