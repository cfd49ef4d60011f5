#include "model/model_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "common/errors.h"
#include "config/args.h"
#include "config/moe_layer_freq.h"

namespace mtrain::model {

int64_t padded_vocab_size(int64_t vocab, int64_t divisible_by, int64_t tp) {
  const int64_t multiple = std::max<int64_t>(1, divisible_by * tp);
  return (vocab + multiple - 1) / multiple * multiple;
}

static lora::LoraConfig lora_config_from_args(const config::Args& a) {
  lora::LoraConfig l;
  l.enabled = a.train_type == "lora";
  if (!l.enabled) return l;
  l.rank = a.lora_rank;
  l.alpha = a.lora_alpha;
  l.dropout = static_cast<float>(a.lora_dropout);
  l.rslora = a.use_rslora;
  l.bias_all = a.lora_bias == "all";
  if (a.target_regex) {
    lora::check_target_regex(*a.target_regex);
    l.target_regex = *a.target_regex;
  } else {
    l.target_modules = lora::resolve_target_modules(a.target_modules);
  }
  l.modules_to_save = lora::resolve_modules_to_save(a.modules_to_save);
  return l;
}

static MoeSettings moe_settings_from_args(const config::Args& a) {
  MoeSettings m;
  if (!a.num_experts) return m;
  m.num_experts = *a.num_experts;
  m.ffn = a.moe_ffn_hidden_size.value_or(a.ffn_hidden_size.value_or(0));
  m.layers = config::moe_layer_pattern(a.moe_layer_freq, a.num_layers);
  m.shared_ffn = a.moe_shared_expert_intermediate_size.value_or(0);
  m.shared_gate = a.moe_shared_expert_gate;
  m.grouped_gemm = a.moe_grouped_gemm;
  m.permute_fusion = a.moe_permute_fusion;
  m.etp = a.expert_tensor_parallel_size;
  m.ep = a.expert_model_parallel_size;
  m.allgather = a.moe_token_dispatcher_type == "allgather";
  m.routing_imbalance = a.moe_routing_imbalance;
  m.router = moe::router_config_from_args(a, m.num_experts);
  return m;
}

ModelConfig model_config_from_args(const config::Args& a, int64_t vocab_size) {
  ModelConfig c;
  c.num_layers = a.num_layers;
  c.hidden = a.hidden_size;
  c.ffn = a.ffn_hidden_size.value();
  c.heads = a.num_attention_heads;
  c.groups = a.group_query_attention ? a.num_query_groups : a.num_attention_heads;
  c.head_dim = a.kv_channels.value();
  c.vocab = vocab_size;
  c.padded_vocab = padded_vocab_size(vocab_size, a.make_vocab_size_divisible_by, a.tensor_model_parallel_size);
  c.mask_padded_vocab = a.mask_padded_vocab;
  c.max_positions = a.max_position_embeddings.value();
  c.seq_length = a.seq_length.value();
  c.micro_batch = a.micro_batch_size;
  c.rmsnorm = a.normalization == "RMSNorm";
  c.swiglu = a.swiglu;
  c.rope = a.position_embedding_type == "rope";
  c.untie = a.untie_embeddings_and_output_weights;
  c.add_bias_linear = a.add_bias_linear;
  c.add_qkv_bias = a.add_qkv_bias;
  c.qk_layernorm = a.qk_layernorm;
  c.norm_eps = static_cast<float>(a.norm_epsilon);
  c.rotary_base = static_cast<float>(a.rotary_base);
  c.hidden_dropout = static_cast<float>(a.hidden_dropout);
  c.attention_dropout = static_cast<float>(a.attention_dropout);
  c.init_std = static_cast<float>(a.init_method_std);
  c.seed = static_cast<uint64_t>(a.seed);
  c.lora = lora_config_from_args(a);
  c.moe = moe_settings_from_args(a);
  c.dtype = a.bf16 ? DType::kBF16 : (a.fp16 ? DType::kF16 : DType::kF32);
  c.grad_dtype = a.grad_reduce_in_bf16 ? DType::kBF16 : DType::kF32;
  c.fusions.masked_softmax = a.masked_softmax_fusion;
  c.fusions.bias_dropout = a.bias_dropout_fusion;
  c.fusions.bias_activation = a.bias_swiglu_fusion;
  c.fusions.cross_entropy = a.cross_entropy_loss_fusion;
  c.fusions.rope = a.apply_rope_fusion;
  c.fusions.rmsnorm = a.use_fused_rmsnorm;
  c.fusions.grad_accumulation = a.gradient_accumulation_fusion;
  c.fusions.flash_attention = a.attention_backend != "unfused";
  const std::string rg = a.recompute_granularity.value_or("none");
  c.recompute = rg == "full" ? Recompute::kFull : (rg == "selective" ? Recompute::kSelective : Recompute::kNone);
  if (c.recompute == Recompute::kFull && a.recompute_method.value_or("uniform") == "block")
    c.recompute_block_layers = a.recompute_num_layers.value_or(c.num_layers);
  c.tp = a.tensor_model_parallel_size;
  c.sequence_parallel = a.sequence_parallel && c.tp > 1;
  return c;
}

std::vector<ModelChunk> pipeline_chunks(int64_t num_layers, int pp, int stage, int vpp, int64_t first_stage_layers,
                                        int64_t last_stage_layers) {
  auto fail = [&] {
    throw Error(ExitCode::kInternal, fmt::format("pipeline_chunks: {} layers do not split over {} stages x {} chunks "
                                                 "(first {}, last {})",
                                                 num_layers, pp, vpp, first_stage_layers, last_stage_layers));
  };
  if (pp < 1 || vpp < 1 || stage < 0 || stage >= pp) fail();
  std::vector<ModelChunk> out;
  if (vpp > 1) {
    if (num_layers % (int64_t{pp} * vpp) != 0 || first_stage_layers || last_stage_layers) fail();
    const int64_t per = num_layers / (int64_t{pp} * vpp);
    for (int c = 0; c < vpp; ++c) {
      const int64_t v = int64_t{c} * pp + stage;
      out.push_back({v * per, per, v == 0, v == int64_t{pp} * vpp - 1});
    }
    return out;
  }
  // Stage sizes: the first/last stages as given, the middle ones even.
  std::vector<int64_t> sizes(pp, 0);
  const int middle = pp - (first_stage_layers > 0 ? 1 : 0) - (last_stage_layers > 0 ? 1 : 0);
  const int64_t rest = num_layers - first_stage_layers - last_stage_layers;
  if (pp == 1 && (first_stage_layers || last_stage_layers)) fail();
  if (middle == 0 ? rest != 0 : (rest < middle || rest % middle != 0)) fail();
  for (int s = 0; s < pp; ++s) sizes[s] = middle > 0 ? rest / middle : 0;
  if (first_stage_layers > 0) sizes[0] = first_stage_layers;
  if (last_stage_layers > 0) sizes[pp - 1] = last_stage_layers;
  int64_t first = 0;
  for (int s = 0; s < stage; ++s) first += sizes[s];
  out.push_back({first, sizes[stage], stage == 0, stage == pp - 1});
  return out;
}

void place_on_rank(ModelConfig& c, const config::Args& a, int tp_rank, int pp_stage) {
  c.tp_rank = tp_rank;
  c.chunks = pipeline_chunks(
      c.num_layers, a.pipeline_model_parallel_size, pp_stage, a.virtual_pipeline_model_parallel_size.value_or(1),
      a.decoder_first_pipeline_num_layers.value_or(0), a.decoder_last_pipeline_num_layers.value_or(0));
}

// ", LoRA r 8 alpha 32 (scale 4) on linear_fc1 linear_fc2 ...", or "" for full training.
static std::string describe_lora(const lora::LoraConfig& l) {
  if (!l.enabled) return "";
  const std::string targets =
      l.target_regex.empty() ? fmt::format("{}", fmt::join(l.target_modules, " ")) : "/" + l.target_regex + "/";
  return fmt::format(", LoRA r {} alpha {} (scale {:g}) on {}{}", l.rank, l.alpha, l.scaling(), targets,
                     l.modules_to_save.empty() ? "" : fmt::format(", training {}", fmt::join(l.modules_to_save, " ")));
}

// ", MoE 8 experts (top-2, ffn 64) in 2 of 4 layers, shared expert 128 (gated)", or "".
static std::string describe_moe(const ModelConfig& c) {
  const MoeSettings& m = c.moe;
  if (m.num_experts == 0) return "";
  int moe_layers = 0;
  for (int v : m.layers) moe_layers += v;
  return fmt::format(
      ", MoE {} experts (top-{}, ffn {}) in {} of {} layers{}", m.num_experts, m.router.topk, m.ffn, moe_layers,
      c.num_layers,
      m.shared_ffn > 0 ? fmt::format(", shared expert {}{}", m.shared_ffn, m.shared_gate ? " (gated)" : "") : "");
}

std::vector<int> chunk_pools(const ModelConfig& c) {
  std::vector<std::vector<int64_t>> shapes;  // per pool: post, then per layer its kind
  std::vector<int> pool;
  for (const ModelChunk& ch : c.chunks) {
    std::vector<int64_t> shape{ch.post ? 1 : 0};
    for (int64_t i = 0; i < ch.num_layers; ++i)
      shape.push_back((c.is_moe_layer(ch.first_layer + i) ? 2 : 0) + (c.layer_recomputed(i) ? 1 : 0));
    const auto it = std::find(shapes.begin(), shapes.end(), shape);
    pool.push_back(static_cast<int>(it - shapes.begin()));
    if (it == shapes.end()) shapes.push_back(std::move(shape));
  }
  return pool;
}

std::string describe(const ModelConfig& c) {
  return fmt::format(
             "GPT: {} layers, hidden {}, ffn {}, heads {} (query groups {}, head dim {}{}), vocab {} (padded {}), {} "
             "{} "
             "{} {}, dtype {}",
             c.num_layers, c.hidden, c.ffn, c.heads, c.groups, c.head_dim, c.qk_layernorm ? ", q/k norm" : "", c.vocab,
             c.padded_vocab, c.rmsnorm ? "RMSNorm" : "LayerNorm", c.swiglu ? "SwiGLU" : "GELU",
             c.rope ? "RoPE" : "learned positions", c.untie ? "untied" : "tied", dtype_name(c.dtype)) +
         describe_lora(c.lora) + describe_moe(c);
}

}  // namespace mtrain::model
