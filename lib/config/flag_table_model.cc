// Flag table, part 1: model shape, parallelism and fusions.
#include "config/flag_table_parts.h"

namespace mtrain::config::detail {

namespace {
constexpr auto M = FlagGroup::kModel;
constexpr auto P = FlagGroup::kParallel;
constexpr auto F = FlagGroup::kFusions;
}  // namespace

std::vector<FlagSpec> model_flags() {
  return {
      {.name = "model_preset",
       .field = &Args::model_preset,
       .group = M,
       .help = "Model shape preset: configs/models/<name>.yaml or a path. Precedence: --model's config.json < "
               "preset < YAML config < command line.",
       .default_text = "none",
       .lists = "models"},
      {.name = "num_layers",
       .field = &Args::num_layers,
       .group = M,
       .help = "Number of transformer layers.",
       .default_text = "required"},
      {.name = "hidden_size",
       .field = &Args::hidden_size,
       .group = M,
       .help = "Transformer hidden size.",
       .default_text = "required"},
      {.name = "ffn_hidden_size",
       .field = &Args::ffn_hidden_size,
       .group = M,
       .help = "MLP hidden size.",
       .default_text = "swiglu ? int(4*hidden*2/3/64)*64 : 4*hidden"},
      {.name = "num_attention_heads",
       .field = &Args::num_attention_heads,
       .group = M,
       .help = "Number of attention (query) heads.",
       .default_text = "required"},
      {.name = "group_query_attention",
       .field = &Args::group_query_attention,
       .group = M,
       .help = "Grouped-query attention with --num_query_groups KV heads. Derived: true when num_query_groups > 1; "
               "false means multi-head attention (KV heads = attention heads).",
       .default_text = "num_query_groups > 1"},
      {.name = "num_query_groups",
       .field = &Args::num_query_groups,
       .group = M,
       .help = "Number of KV heads with grouped-query attention."},
      {.name = "kv_channels",
       .field = &Args::kv_channels,
       .group = M,
       .help = "Attention head dimension.",
       .default_text = "hidden_size / num_attention_heads"},
      {.name = "max_position_embeddings",
       .field = &Args::max_position_embeddings,
       .group = M,
       .help = "Maximum sequence length the position embeddings support.",
       .default_text = "seq_length"},
      {.name = "seq_length",
       .field = &Args::seq_length,
       .group = M,
       .help = "Training sequence length (tokens per sample).",
       .default_text = "max_length, else max_position_embeddings"},
      {.name = "normalization",
       .field = &Args::normalization,
       .group = M,
       .help = "Normalization layer.",
       .choices = {"LayerNorm", "RMSNorm"}},
      {.name = "norm_epsilon",
       .field = &Args::norm_epsilon,
       .group = M,
       .help = "Epsilon of the norm layers.",
       .aliases = {"layernorm_epsilon"}},
      {.name = "swiglu", .field = &Args::swiglu, .group = M, .help = "SwiGLU MLP; false uses GELU."},
      {.name = "position_embedding_type",
       .field = &Args::position_embedding_type,
       .group = M,
       .help = "Position embedding. mrope, relative and none are Megatron choices mtrain does not support.",
       .choices = {"learned_absolute", "rope", "mrope", "relative", "none"}},
      {.name = "rotary_base", .field = &Args::rotary_base, .group = M, .help = "RoPE base (theta)."},
      {.name = "untie_embeddings_and_output_weights",
       .field = &Args::untie_embeddings_and_output_weights,
       .group = M,
       .help = "Separate output-layer weights; false ties them to the input embedding.",
       .negations = {"tie_word_embeddings"}},
      {.name = "add_bias_linear",
       .field = &Args::add_bias_linear,
       .group = M,
       .help = "Biases in all linear layers (QKV bias is --add_qkv_bias).",
       .negations = {"disable_bias_linear"}},
      {.name = "add_qkv_bias", .field = &Args::add_qkv_bias, .group = M, .help = "Bias in the QKV projection (Qwen)."},
      {.name = "qk_layernorm",
       .field = &Args::qk_layernorm,
       .group = M,
       .help =
           "Whether to layer normalize the q and k attention embeddings: a --normalization norm (weights of "
           "size kv_channels, --norm_epsilon) over each head's query and key before RoPE (Qwen3's q_norm, k_norm)."},
      {.name = "hidden_dropout",
       .field = &Args::hidden_dropout,
       .group = M,
       .help = "Dropout after attention and MLP, in [0, 1). Megatron-LM default 0.1."},
      {.name = "attention_dropout",
       .field = &Args::attention_dropout,
       .group = M,
       .help = "Dropout on attention probabilities, in [0, 1). Megatron-LM default 0.1."},
      {.name = "make_vocab_size_divisible_by",
       .field = &Args::make_vocab_size_divisible_by,
       .group = M,
       .help = "Pad the vocabulary to a multiple of this times tensor_model_parallel_size."},
      {.name = "mask_padded_vocab",
       .field = &Args::mask_padded_vocab,
       .group = M,
       .help = "The padded (dummy) vocabulary ids get -inf logits: no probability, no loss, no gradient, so the loss "
               "is the model's own at every TP size. false: they join the softmax as in Megatron-LM "
               "(bit-compatible with it; the loss then depends on the padding, i.e. on TP)."},
      {.name = "init_method_std",
       .field = &Args::init_method_std,
       .group = M,
       .help = "Standard deviation of the normal weight initialization."},
      {.name = "vocab_size",
       .field = &Args::vocab_size,
       .group = M,
       .help = "Vocabulary size before padding. Without --tokenizer on `pt --data_path` it selects Megatron's "
               "NullTokenizer (token ids as they are; end of document vocab_size - 1).",
       .default_text = "from the tokenizer"},
      {.name = "model",
       .field = &Args::model,
       .group = M,
       .help = "Hugging Face model directory (config.json, model*.safetensors, tokenizer.json; Llama or Qwen2) to "
               "train from. Its config.json supplies the model flags (num_layers, hidden_size, ffn_hidden_size, "
               "num_attention_heads, num_query_groups, kv_channels, vocab_size, normalization, swiglu, "
               "position_embedding_type, untie_embeddings_and_output_weights, add_bias_linear, add_qkv_bias) below "
               "every other source; an explicit value that contradicts them is an error. max_position_embeddings, "
               "norm_epsilon and rotary_base may be overridden (with a warning). --tokenizer defaults to its "
               "tokenizer.json (else its tokenizer.model). Its weights are the starting point unless --load resumes a "
               "checkpoint; `mtrain "
               "export --to_mcore` converts the directory into a checkpoint instead.",
       .default_text = "none"},
  };
}

std::vector<FlagSpec> parallel_flags() {
  return {
      {.name = "tensor_model_parallel_size",
       .field = &Args::tensor_model_parallel_size,
       .group = P,
       .help = "Tensor-parallel size (TP)."},
      {.name = "pipeline_model_parallel_size",
       .field = &Args::pipeline_model_parallel_size,
       .group = P,
       .help = "Pipeline-parallel size (PP)."},
      {.name = "context_parallel_size",
       .field = &Args::context_parallel_size,
       .group = P,
       .help = "Context-parallel size (CP): each sequence is split over CP ranks (see --context_parallel_algo)."},
      {.name = "context_parallel_algo",
       .field = &Args::context_parallel_algo,
       .group = P,
       .help = "MindSpeed's CP algorithm: megatron_cp_algo (ring attention, K/V blocks passed around the CP group) "
               "or ulysses_cp_algo (all-to-all from sequence to heads and back); the hybrid, adaptive and "
               "kvallgather algorithms are refused.",
       .choices = {"megatron_cp_algo", "ulysses_cp_algo", "hybrid_cp_algo", "adaptive_cp_algo",
                   "hybrid_adaptive_cp_algo", "kvallgather_cp_algo"}},
      {.name = "cp_attention_mask_type",
       .field = &Args::cp_attention_mask_type,
       .group = P,
       .help = "MindSpeed's ring-attention mask (megatron_cp_algo): causal (the blocks the causal mask hides are "
               "skipped and each diagonal block runs its visible half) or general (every ring step computes its "
               "whole block under an explicit mask, as MindSpeed's general mask does: twice the attention work, "
               "the same result).",
       .aliases = {"attention_mask_type"},
       .choices = {"causal", "general"}},
      {.name = "expert_model_parallel_size",
       .field = &Args::expert_model_parallel_size,
       .group = P,
       .help = "Expert-parallel size (EP, MoE): EP rank r holds experts [r*E/EP, (r+1)*E/EP); tokens reach them "
               "by all-to-all (alltoall dispatcher) or all-gather over TP x EP (allgather)."},
      {.name = "sequence_parallel",
       .field = &Args::sequence_parallel,
       .group = P,
       .help = "Sequence parallelism inside the TP group (disabled with a warning at TP=1)."},
      {.name = "use_distributed_optimizer",
       .field = &Args::use_distributed_optimizer,
       .group = P,
       .help = "Shard optimizer state across data-parallel ranks (ZeRO-1). Megatron-LM default false."},
      {.name = "distributed_timeout_minutes",
       .field = &Args::distributed_timeout_minutes,
       .group = P,
       .help = "Watchdog: a rank whose training makes no progress (no step, no collective) for this many minutes "
               "ends with exit code 8, naming itself, so a stuck or dead peer never hangs the job. Fractions are "
               "allowed (0.5 = 30 s). Active only with more than one rank (a single process has no peer to wait "
               "for). Megatron-LM default 10."},
      {.name = "use_tp_pp_dp_mapping",
       .field = &Args::use_tp_pp_dp_mapping,
       .group = P,
       .help = "Rank order tp-cp-ep-pp-dp instead of tp-cp-ep-dp-pp."},
      {.name = "decoder_first_pipeline_num_layers",
       .field = &Args::decoder_first_pipeline_num_layers,
       .group = P,
       .help = "Layers on the first pipeline stage (uneven pipeline)."},
      {.name = "decoder_last_pipeline_num_layers",
       .field = &Args::decoder_last_pipeline_num_layers,
       .group = P,
       .help = "Layers on the last pipeline stage (uneven pipeline)."},
      {.name = "num_layers_per_virtual_pipeline_stage",
       .field = &Args::num_layers_per_virtual_pipeline_stage,
       .group = P,
       .help = "Layers per virtual pipeline stage (interleaved schedule)."},
      {.name = "virtual_pipeline_model_parallel_size",
       .field = &Args::virtual_pipeline_model_parallel_size,
       .group = P,
       .help = "Virtual pipeline stages per pipeline rank (interleaved schedule).",
       .aliases = {"num_virtual_stages_per_pipeline_rank"},
       .default_text = "layers per stage / num_layers_per_virtual_pipeline_stage"},
      {.name = "overlap_grad_reduce",
       .field = &Args::overlap_grad_reduce,
       .group = P,
       .help = "Start each data-parallel gradient bucket's reduction as soon as the last micro-batch's backward has "
               "produced all its gradients, overlapping it with the rest of backward. The results are "
               "bit-identical to the reduction after backward."},
      {.name = "overlap_param_gather",
       .field = &Args::overlap_param_gather,
       .group = P,
       .help = "With the distributed optimizer: start each bucket's parameter all-gather after the optimizer step "
               "without waiting, and wait for it just before the next forward of the model chunk that reads it. "
               "Needs --use_distributed_optimizer and --overlap_grad_reduce (Megatron-LM). The results are "
               "bit-identical to the gather in the optimizer step; a checkpoint save waits for it first."},
      {.name = "tp_comm_overlap",
       .field = &Args::tp_comm_overlap,
       .group = P,
       .help = "Overlap the tensor-parallel all-gather / reduce-scatter of sequence parallelism with the GEMM "
               "beside it, split into TP-size chunks (Megatron-LM's userbuffers overlap). Needs "
               "--sequence_parallel. The math is unchanged: it changes the simulated device timeline "
               "(--dry_run, --log_throughput)."},
      {.name = "use_ascend_mc2",
       .field = &Args::use_ascend_mc2,
       .group = P,
       .help = "MindSpeed's MC2: the matmul fused with the tensor-parallel all-gather / reduce-scatter on "
               "Ascend, priced as --tp_comm_overlap. Needs --sequence_parallel. The math is unchanged: it "
               "changes the simulated device timeline (--dry_run, --log_throughput)."},
      {.name = "ddp_bucket_size",
       .field = &Args::ddp_bucket_size,
       .group = P,
       .help = "Elements per data-parallel gradient bucket (rounded up to a multiple of the DP size). Smaller "
               "buckets start reducing earlier with --overlap_grad_reduce.",
       .default_text = "max(40000000, 1000000 * data parallel size)"},
      {.name = "recompute_granularity",
       .field = &Args::recompute_granularity,
       .group = P,
       .help = "Activation recomputation: selective (core attention), full (whole layers), none. "
               "Megatron-LM default None.",
       .choices = {"full", "selective", "none"}},
      {.name = "recompute_method",
       .field = &Args::recompute_method,
       .group = P,
       .help = "With full recomputation: uniform or block.",
       .choices = {"uniform", "block"}},
      {.name = "recompute_num_layers",
       .field = &Args::recompute_num_layers,
       .group = P,
       .help = "With full recomputation: layers per group (uniform) or per stage (block)."},
  };
}

std::vector<FlagSpec> fusion_flags() {
  return {
      {.name = "masked_softmax_fusion",
       .field = &Args::masked_softmax_fusion,
       .group = F,
       .help = "Fused causal mask + scale + softmax (unfused attention path)."},
      {.name = "bias_dropout_fusion",
       .field = &Args::bias_dropout_fusion,
       .group = F,
       .help = "Fused bias + dropout + residual add."},
      {.name = "bias_swiglu_fusion",
       .field = &Args::bias_swiglu_fusion,
       .group = F,
       .help = "Fused bias + activation (SwiGLU, or GELU with --swiglu false).",
       .aliases = {"bias_activation_fusion", "use_fused_swiglu", "bias_gelu_fusion"},
       .negations = {"no_bias_swiglu_fusion", "no_bias_activation_fusion", "no_bias_gelu_fusion"}},
      {.name = "cross_entropy_loss_fusion",
       .field = &Args::cross_entropy_loss_fusion,
       .group = F,
       .help = "Fused softmax + cross-entropy (swift v3 default false, v4 true)."},
      {.name = "apply_rope_fusion",
       .field = &Args::apply_rope_fusion,
       .group = F,
       .help = "Fused RoPE kernel. mtrain defaults it on (swift v4: false) because its fused kernel is exact.",
       .aliases = {"use_fused_rotary_pos_emb"},
       .negations = {"no_rope_fusion"}},
      {.name = "use_fused_rmsnorm",
       .field = &Args::use_fused_rmsnorm,
       .group = F,
       .help = "Fused single-pass RMSNorm. mtrain defaults it on (MindSpeed: off) because it is exact."},
      {.name = "gradient_accumulation_fusion",
       .field = &Args::gradient_accumulation_fusion,
       .group = F,
       .help = "Accumulate weight gradients directly in the main-grad buffer inside the GEMM."},
      {.name = "attention_backend",
       .field = &Args::attention_backend,
       .group = F,
       .help = "Attention kernel: flash (tiled, online softmax) or unfused (materialized scores); auto means flash, "
               "local means unfused; fused (cuDNN) is not available. Megatron-LM default auto.",
       .choices = {"flash", "unfused", "fused", "local", "auto"}},
      {.name = "use_flash_attn",
       .field = &Args::use_flash_attn,
       .group = F,
       .help = "MindSpeed/Megatron spelling of --attention_backend flash."},
  };
}

}  // namespace mtrain::config::detail
