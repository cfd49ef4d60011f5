// LoRA on an MoE layer, the model's side: which of its linears get adapters,
// their parameters and TP/EP flags, and the addresses handed to the layer.
// The math is moe/expert_lora.h (routed experts) and lora/lora_linear.h (the
// shared expert, split over TP like the dense MLP).
#include <algorithm>

#include "common/rng.h"
#include "model/lora_layer.h"

namespace mtrain::model {

namespace {

// An expert adapter's gradient flags, as its expert's weights have them
// (moe_block.cc): under EP it is reduced over expt-dp (which holds the TP
// peers); otherwise a tensor whole on every TP rank (ETP 1, or the replicated
// half under ETP = TP) gets this rank's tokens or a partial sum over the TP
// ranks' rows, so its gradient is summed over TP and counted once.
void mark_expert(ParamStore& ps, const ModelConfig& c, int i) {
  ParamInfo& p = ps.mutable_info(i);
  if (c.moe.ep > 1) {
    p.expert_parallel = true;
    p.counts_in_norm = true;
    return;
  }
  if (p.shard.split == TpSplit::kReplicated || p.shard.tp == 1) {
    p.counts_in_norm = c.tp_rank == 0;
    p.sequence_parallel_grad = c.sequence_parallel;
  }
}

void add_expert_site(moe::ExpertAdapterSite& s, ParamStore& ps, const std::vector<AdapterParams>& per_expert) {
  for (const AdapterParams& ap : per_expert) {
    const bool on = ap.a >= 0;
    s.a.push_back(on ? ps.param(ap.a) : nullptr);
    s.b.push_back(on ? ps.param(ap.b) : nullptr);
    s.a_grad.push_back(on ? ps.grad(ap.a) : nullptr);
    s.b_grad.push_back(on ? ps.grad(ap.b) : nullptr);
  }
}

}  // namespace

void add_moe_adapters(ParamStore& ps, const ModelConfig& c, const std::string& prefix, MoeLayerParams& mp) {
  const int64_t C = c.hidden, F = c.moe.ffn;
  const int parts = c.swiglu ? 2 : 1;
  const std::string p = prefix + "mlp.";
  for (int64_t e = c.moe.first_local(); e < c.moe.first_local() + c.moe.num_local(); ++e) {
    const std::string x = p + "experts.local_experts." + std::to_string(e) + ".";
    AdapterParams fc1, fc2;
    if (c.lora.targets(x + "linear_fc1"))
      fc1 = add_adapter(ps, c, x + "linear_fc1", C, parts * F, true, parts, c.expert_tp());
    if (c.lora.targets(x + "linear_fc2")) fc2 = add_adapter(ps, c, x + "linear_fc2", F, C, false, 1, c.expert_tp());
    for (int i : {fc1.a, fc1.b, fc2.a, fc2.b})
      if (i >= 0) mark_expert(ps, c, i);
    mp.fc1_lora.push_back(fc1);
    mp.fc2_lora.push_back(fc2);
  }
  if (c.moe.shared_ffn == 0) return;
  const int64_t Fs = c.moe.shared_ffn;
  const std::string s = p + "shared_experts.";
  if (c.lora.targets(s + "linear_fc1"))
    mp.shared_lora[0] = add_adapter(ps, c, s + "linear_fc1", C, parts * Fs, true, parts, c.tp);
  if (c.lora.targets(s + "linear_fc2")) mp.shared_lora[1] = add_adapter(ps, c, s + "linear_fc2", Fs, C, false, 1, c.tp);
}

void add_moe_adapter_weights(moe::MoeWeights& w, const ModelConfig& c, ParamStore& ps, const MoeLayerParams& mp,
                             int64_t T, uint64_t seed, bool training) {
  w.lora.rank = c.lora.rank;
  w.lora.scale = c.lora.scaling();
  w.lora.dropout = training ? c.lora.dropout : 0.f;
  w.lora.seed_fc1 = stream_seed(seed, kSiteLoraDropout + 4);
  w.lora.seed_fc2 = stream_seed(seed, kSiteLoraDropout + 5);
  w.lora.seq_pitch = std::max(T, c.seq_length);  // as the dense adapters' (lora_layer.cc)
  w.lora.ffn = c.moe.ffn;
  w.lora.fc2_col0 = c.expert_tp() > 1 ? c.tp_rank * (c.moe.ffn / c.expert_tp()) : 0;
  add_expert_site(w.lora.fc1, ps, mp.fc1_lora);
  add_expert_site(w.lora.fc2, ps, mp.fc2_lora);
  // The shared expert takes the dense MLP's place, and its dropout streams.
  w.shared_fc1_lora = adapter_weights(c, ps, mp.shared_lora[0], kSiteFc1, T, seed, training);
  w.shared_fc2_lora = adapter_weights(c, ps, mp.shared_lora[1], kSiteFc2, T, seed, training);
}

}  // namespace mtrain::model
