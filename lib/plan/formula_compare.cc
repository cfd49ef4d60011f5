#include "plan/formula_compare.h"

#include <fmt/format.h>

#include <algorithm>

#include "config/moe_layer_freq.h"
#include "model/model_config.h"
#include "plan/activation_buffers.h"

namespace mtrain::plan {

using device::MemCategory;

static double gib(double b) { return b / static_cast<double>(1LL << 30); }

// theoretical_memory_usage.py (estimator-formulas.md §1b; MoE split as its
// EP-aware form 1bcb3b9e): TP-sharded parameters (attention, dense MLP,
// shared experts, embedding) / t, replicated ones (norms, routers) not
// divided, routed experts / (ETP x EP) at 6 + 12/EDP bytes with the
// distributed optimizer, EDP = world / (ETP x EP x p). No MTP.
static double megatron_states(const config::Args& a, double v_pad) {
  const double h = a.hidden_size, ffn = *a.ffn_hidden_size;
  const double r_q = static_cast<double>(*a.kv_channels) * a.num_attention_heads / h;
  const double g_over_a = static_cast<double>(a.num_query_groups) / a.num_attention_heads;
  const double m = a.swiglu ? 1.5 : 1, n = a.normalization == "RMSNorm" ? 1 : 2;
  const double t = a.tensor_model_parallel_size, p = a.pipeline_model_parallel_size, d = a.data_parallel_size;
  const double attn = 2 * h * h * (1 + g_over_a) * r_q;
  double sharded = 0, replicated = n * h, routed = 0;  // over the whole model; n * h: the final norm
  const std::vector<int> moe =
      a.num_experts ? config::moe_layer_pattern(a.moe_layer_freq, a.num_layers) : std::vector<int>(a.num_layers, 0);
  for (int layer : moe) {
    replicated += 2 * h * n;
    if (!layer) {
      sharded += attn + 2 * h * ffn * m;
      continue;
    }
    const double E = *a.num_experts;
    sharded += attn + 2 * h * a.moe_shared_expert_intermediate_size.value_or(0) * m;
    replicated += h * E;
    routed += 2 * h * *a.moe_ffn_hidden_size * E * m;
  }
  // A dense model keeps the 00caa53a form, where the norms are divided by t with the rest.
  if (!a.num_experts) sharded += replicated, replicated = 0;
  double shard = (sharded / p + v_pad * h) / t + replicated / p;
  if (a.untie_embeddings_and_output_weights && p == 1) shard += v_pad * h / t;
  const double experts = routed / p / (a.expert_tensor_parallel_size * a.expert_model_parallel_size);
  const double edp = static_cast<double>(a.world_size) /
                     (a.expert_tensor_parallel_size * a.expert_model_parallel_size * a.pipeline_model_parallel_size);
  if (!a.use_distributed_optimizer) return (shard + experts) * 18;
  return shard * (6 + 12 / d) + experts * (6 + 12 / edp);
}

// compute_activation_memory (§1c): first stage, SP + selective recompute only.
static void megatron_activations(const config::Args& a, double v_pad, MegatronFormulas& f) {
  if (!a.sequence_parallel || a.recompute_granularity.value_or("") != "selective") return;
  const double s = *a.seq_length, b = a.micro_batch_size, h = a.hidden_size, L = a.num_layers;
  const double p = a.pipeline_model_parallel_size, t = a.tensor_model_parallel_size;
  const double ffn = *a.ffn_hidden_size;
  double act = s * b * h * (18 + 4 * ffn / h) * L + 8 * s * b * p + s * b * h * p;
  const int v = a.virtual_pipeline_model_parallel_size.value_or(1);
  if (v > 1) {
    act *= 1 + (p - 1) / (p * v);
  } else if (p > 1) {
    act *= std::min(1.0, a.num_micro_batches / p);
  }
  if (p == 1) {
    act += 4 * s * b * h * (1 + v_pad / h);
    f.logits = 4 * s * b * v_pad / t;
  }
  f.activations = act / t;
}

MegatronFormulas megatron_formulas(const config::Args& a) {
  const double v_pad = static_cast<double>(
      model::padded_vocab_size(*a.vocab_size, a.make_vocab_size_divisible_by, a.tensor_model_parallel_size));
  MegatronFormulas f;
  f.states = megatron_states(a, v_pad);
  megatron_activations(a, v_pad, f);
  return f;
}

// mtrain's saved activations of one layer minus Megatron's sbh(18 + 4ffn/h)/t,
// term by term (tests/plan/test_memory_fidelity.cc pins each).
static double layer_difference(const config::Args& a) {
  const double s = *a.seq_length, b = a.micro_batch_size, h = a.hidden_size, t = a.tensor_model_parallel_size;
  const double sb = s * b, gd = static_cast<double>(a.num_query_groups) * *a.kv_channels;
  double d = -2 * sb * h / t + 2 * sb * h / t;            // no dropout masks; per-head attention output kept
  d += (a.normalization == "RMSNorm" ? 8 : 16) * sb / t;  // fp32 norm statistics
  if (a.attention_backend != "unfused") d += 4 * sb * a.num_attention_heads / t;  // flash log-sum-exp
  d += 4 * sb * (gd - h) / t;                                                     // K and V at g x head_dim
  if (a.swiglu) d += 2 * sb * *a.ffn_hidden_size / t;                             // fc1 output 2 ffn wide
  return d;
}

// One row of a residual stream: this rank's tokens of a micro-batch x hidden, at the model's dtype.
static int64_t residual_row_bytes(const DryRun& r) {
  const model::ModelConfig& m = r.whole_model;
  return m.tokens_local(m.micro_batch * m.seq_length) * m.hidden * dtype_bytes(m.dtype);
}

static const ClassMemory* first_stage(const DryRun& r) {
  const ClassMemory* best = nullptr;
  for (const ClassMemory& c : r.classes)
    if (c.rank_class.stage == 0 && (!best || c.stats.max_reserved > best->stats.max_reserved)) best = &c;
  return best;
}

std::string formula_comparison(const DryRun& r, const config::Args& a) {
  const ClassMemory* c = first_stage(r);
  if (!a.bf16 || !a.vocab_size || !c) return "";  // the formulas assume bf16 params and fp32 grads
  const MegatronFormulas f = megatron_formulas(a);
  auto cat = [&](MemCategory k) { return static_cast<double>(c->stats.by_category[static_cast<int>(k)]); };
  const double states = cat(MemCategory::kWeights) + cat(MemCategory::kGrads) + cat(MemCategory::kOptimizer);
  std::string s = "\nvs Megatron's formulas (pipeline stage 0):\n";
  if (a.train_type == "lora")  // the formula assumes every weight trains
    s += "  weights+grads+optimizer: Megatron's formula is for full training (LoRA: frozen base, no states)\n";
  else
    s += fmt::format(
        "  weights+grads+optimizer {:.2f} GiB, theoretical_memory_usage {:.2f} GiB: {:+.2f} GiB (norm weights whole "
        "on every TP rank, linear biases, position embeddings, final norm on the last stage, DP bucket padding)\n",
        gib(states), gib(f.states), gib(states - f.states));
  if (f.activations == 0)
    return s + "  activations: Megatron's formula needs --sequence_parallel and selective recompute\n";
  const double act = cat(MemCategory::kActivations);
  s += fmt::format("  activations {:.2f} GiB, Korthikanti et al. {:.2f} GiB{}: {:+.2f} GiB\n", gib(act),
                   gib(f.activations),
                   f.logits > 0 ? fmt::format(" (of which fp32 logits s*b*V/t*4 {:.2f} GiB)", gib(f.logits)) : "",
                   gib(act - f.activations));
  s += fmt::format(
      "    per layer and micro-batch {:+.1f} KiB: no dropout masks, per-head attention output kept, fp32 norm "
      "statistics, flash log-sum-exp, K/V at query groups x head dim, SwiGLU fc1 2 ffn wide;\n",
      layer_difference(a) / 1024);
  return s + format_activation_rest(activation_breakdown(c->activation_buffers, residual_row_bytes(r)), "    ");
}

}  // namespace mtrain::plan
