// Args: every setting of an mtrain run, one field per flag, named by the
// canonical (underscore, Megatron-SWIFT / Megatron-LM) flag name.
//
// Defaults are Megatron-SWIFT's where swift and Megatron-LM differ (the
// `mtrain sft` user is a swift user); see docs/FLAGS.md for every default and
// alias. `std::optional` marks swift/Megatron "None" defaults; validate()
// fills the derived ones (ffn_hidden_size, kv_channels, seq_length, max_length,
// max_position_embeddings, lr, loss_scale, lr_decay_iters when train_iters is
// known) so that after validate() they are always set.
//
// The flag table (flags.h) maps names, aliases and help text onto these
// fields; add a setting there and here, nowhere else.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace mtrain::config {

struct Args {
  // ---- command (not flags) ------------------------------------------------
  std::string command = "sft";  // "sft" or "pt" (pretrain)
  std::string config_file;      // the YAML given positionally or with --config ("" = none)

  // ---- model --------------------------------------------------------------
  std::string model_preset;            // configs/models/<name>.yaml, lowest precedence
  int num_layers = 0;                  // 0 = not set; required (validate() fails otherwise)
  int hidden_size = 0;                 // 0 = not set; required
  std::optional<int> ffn_hidden_size;  // derived: swiglu ? int(4h*2/3/64)*64 : 4h
  int num_attention_heads = 0;         // 0 = not set; required
  // swift derives it from num_query_groups > 1; after validate() it is true
  // exactly when num_query_groups < num_attention_heads.
  bool group_query_attention = false;
  // KV heads. After validate() always the effective count (= heads for MHA).
  int num_query_groups = 1;
  std::optional<int> kv_channels;              // head dim; derived: hidden_size / num_attention_heads
  std::optional<int> max_position_embeddings;  // derived: seq_length
  std::optional<int> seq_length;               // derived: max_length, else max_position_embeddings
  std::string normalization = "RMSNorm";       // LayerNorm | RMSNorm
  double norm_epsilon = 1e-5;
  bool swiglu = true;                            // false: GELU MLP
  std::string position_embedding_type = "rope";  // learned_absolute | rope
  double rotary_base = 10000;
  bool untie_embeddings_and_output_weights = true;
  bool add_bias_linear = false;  // --disable_bias_linear true <=> add_bias_linear false
  bool add_qkv_bias = true;
  bool qk_layernorm = false;  // per-head norm of queries and keys (Qwen3's q_norm / k_norm)
  double hidden_dropout = 0.0;
  double attention_dropout = 0.0;
  int make_vocab_size_divisible_by = 128;
  bool mask_padded_vocab = true;  // false: padded logits join the softmax (Megatron)
  double init_method_std = 0.02;
  std::optional<int> vocab_size;     // normally from the tokenizer; presets may set it
  std::optional<std::string> model;  // HF model dir: its config.json gives the model flags (hf_model_config.h)

  // ---- parallelism --------------------------------------------------------
  int tensor_model_parallel_size = 1;
  int pipeline_model_parallel_size = 1;
  int context_parallel_size = 1;
  std::string cp_attention_mask_type = "causal";           // MindSpeed: causal | general (the ring's blocks)
  std::string context_parallel_algo = "megatron_cp_algo";  // MindSpeed: megatron_cp_algo (ring) | ulysses_cp_algo
  int expert_model_parallel_size = 1;
  bool sequence_parallel = false;  // forced off (with a warning) at TP=1
  bool use_distributed_optimizer = true;
  bool use_tp_pp_dp_mapping = false;        // rank order tp-cp-ep-pp-dp instead of tp-cp-ep-dp-pp
  double distributed_timeout_minutes = 10;  // per-rank watchdog (train/watchdog.h); world size > 1 only
  std::optional<int> decoder_first_pipeline_num_layers;
  std::optional<int> decoder_last_pipeline_num_layers;
  std::optional<int> num_layers_per_virtual_pipeline_stage;
  std::optional<int> virtual_pipeline_model_parallel_size;  // derived from the above; None when 1
  bool overlap_grad_reduce = false;
  bool overlap_param_gather = false;   // needs the distributed optimizer and overlap_grad_reduce
  bool tp_comm_overlap = false;        // needs sequence_parallel; the simulated timeline only
  bool use_ascend_mc2 = false;         // MindSpeed MC2; needs sequence_parallel; as tp_comm_overlap
  std::optional<int> ddp_bucket_size;  // None: Megatron's max(40M, 1M * DP)
  std::optional<std::string> recompute_granularity = "selective";  // full | selective; "none" -> None
  std::optional<std::string> recompute_method;                     // uniform | block (full only)
  std::optional<int> recompute_num_layers;

  // ---- fusions (all on by default: the fast path) -------------------------
  bool masked_softmax_fusion = true;
  bool bias_dropout_fusion = true;
  bool bias_swiglu_fusion = true;  // bias + activation (SwiGLU or GELU)
  bool cross_entropy_loss_fusion = true;
  bool apply_rope_fusion = true;  // swift v4 default False; mtrain's fused kernel is exact
  bool use_fused_rmsnorm = true;  // swift/MindSpeed default False; exact here too
  bool gradient_accumulation_fusion = true;
  std::string attention_backend = "flash";  // after validate(): flash | unfused
  bool use_flash_attn = false;              // true requires attention_backend flash

  // ---- training / optimizer / precision ------------------------------------
  int micro_batch_size = 1;
  int global_batch_size = 16;
  std::optional<int> train_iters;       // one of train_iters / num_train_epochs is required
  std::optional<int> num_train_epochs;  // v3 max_epochs
  std::optional<double> lr;             // derived: 1e-5 (full), 1e-4 (lora)
  double min_lr = 0.0;
  std::string lr_decay_style = "cosine";  // constant | linear | cosine | inverse-square-root | WSD
  std::optional<int> lr_decay_iters;      // derived: train_iters
  int lr_warmup_iters = 0;
  std::optional<double> lr_warmup_fraction;
  double lr_warmup_init = 0.0;
  std::string lr_wsd_decay_style = "exponential";  // exponential | linear | cosine | minus_sqrt
  std::optional<int> lr_wsd_decay_iters;
  double weight_decay = 0.1;
  double clip_grad = 1.0;  // 0 disables clipping
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.95;
  double adam_eps = 1e-8;
  std::string optimizer = "adam";  // adam (= AdamW) | sgd
  double sgd_momentum = 0.9;
  bool bf16 = false;
  bool fp16 = false;
  bool grad_reduce_in_bf16 = false;  // Megatron: main grads kept and reduced in bf16 (with --bf16)
  // Megatron's static fp16 loss scale (--loss-scale NUMBER); None = dynamic.
  // `--loss_scale 1024` (a number) lands here, `--loss_scale all` in loss_scale.
  std::optional<double> static_loss_scale;
  double initial_loss_scale = 4294967296.0;  // 2**32
  double min_loss_scale = 1.0;
  int loss_scale_window = 1000;
  int hysteresis = 2;
  int seed = 42;
  std::optional<int> num_threads;  // None: cores / ranks on this node
  bool check_for_nan_in_loss_and_grad = true;
  std::string on_nonfinite = "abort";  // abort | skip
  int max_consecutive_nonfinite_skips = 5;
  std::string train_type = "full";  // v4 tuner_type: full | lora

  // ---- LoRA (--train_type lora; Megatron-SWIFT names and defaults) ----------
  int lora_rank = 8;
  int lora_alpha = 32;
  double lora_dropout = 0.05;
  std::string lora_bias = "none";  // none | all (every bias of the base trains)
  bool use_rslora = false;
  std::vector<std::string> target_modules = {"all-linear"};
  std::optional<std::string> target_regex;  // overrides target_modules
  std::vector<std::string> modules_to_save;
  // Accepted by name and refused (not implemented yet): unsupported.cc.
  std::optional<std::string> adapter_load;  // v4 mcore_adapter
  bool merge_lora = false;
  std::optional<std::string> lora_dtype;
  bool use_dora = false;
  std::optional<double> lorap_lr_ratio;
  std::string init_weights = "true";

  // ---- mixture of experts: the layer (router flags: flag_table_moe_router.cc) --
  std::optional<int> num_experts;                          // None: dense model
  std::optional<int> moe_ffn_hidden_size;                  // derived: ffn_hidden_size
  std::string moe_layer_freq = "1";                        // N, or a pattern "([1]*3+[0]*1)*2"
  std::optional<int> moe_shared_expert_intermediate_size;  // None: no shared expert
  bool moe_shared_expert_gate = false;                     // Qwen2-MoE's sigmoid gate on the shared expert
  bool moe_grouped_gemm = true;                            // swift's default; false: a loop of per-expert GEMMs
  bool moe_permute_fusion = false;                         // one fused permute(+probs) pass instead of two
  bool overlap_moe_expert_parallel_comm = false;           // refused (config/unsupported.cc)
  bool moe_enable_deepep = false;                          // refused (config/unsupported.cc)
  std::string moe_token_dispatcher_type = "alltoall";      // alltoall | allgather (flex refused)
  int expert_tensor_parallel_size = 1;                     // swift >= 3.9: 1 (Megatron-LM: TP)

  // ---- MoE router (Megatron-core names and defaults; meaningful with --num_experts) ----
  int moe_router_topk = 2;
  std::string moe_router_score_function = "softmax";  // softmax | sigmoid
  bool moe_router_pre_softmax = false;
  std::optional<double> moe_router_topk_scaling_factor;
  std::string moe_router_load_balancing_type = "aux_loss";  // aux_loss | seq_aux_loss | none
  double moe_aux_loss_coeff = 0.0;
  std::optional<double> moe_z_loss_coeff;
  bool moe_router_enable_expert_bias = false;
  double moe_router_bias_update_rate = 1e-3;
  std::optional<double> moe_expert_capacity_factor;  // None: no token dropping
  std::string moe_token_drop_policy = "probs";       // probs | position
  bool moe_pad_expert_input_to_capacity = false;
  double moe_routing_imbalance = 1.0;  // mtrain: the expert buffers' planned load over the balanced share

  // ---- data ----------------------------------------------------------------
  std::vector<std::string> dataset;
  std::vector<std::string> val_dataset;
  double split_dataset_ratio = 0.0;
  std::optional<int> max_length;               // derived: seq_length (max_length <= seq_length)
  std::string truncation_strategy = "delete";  // delete | left | right
  std::optional<std::string> tokenizer;
  std::optional<std::string> tokenizer_type;  // NullTokenizer: pt --data_path with --vocab_size, no file
  int data_seed = 42;
  bool dataset_shuffle = true;
  std::string text_key = "text";
  // Megatron indexed pretraining data (pt): --data_path [w1] prefix1 [w2] prefix2 ...
  std::vector<std::string> data_path;
  std::string split = "969,30,1";              // train,valid,test weights over documents
  std::optional<std::string> data_cache_path;  // None: <data dir>/cache/GPTDataset_indices
  // swift's token weighting: default (answer tokens) | all | last_round.
  // derived: "default" for sft, "all" for pt. A numeric --loss_scale is
  // Megatron's fp16 loss scale and goes to static_loss_scale instead.
  std::optional<std::string> loss_scale;
  // sft data (lib/data/sft_files.h, chat_template.h, packing.h)
  std::optional<std::string> template_name;  // --template; None: tokenizer_config's chat_template
  bool packing = false;                      // rows of max_length tokens from several samples
  bool strict = true;                        // false: skip malformed records (swift --strict)
  int max_malformed = 100;                   // with strict false: the most records skipped

  // ---- logging / eval / output ---------------------------------------------
  int log_interval = 5;
  bool progress = true;              // the progress line on a terminal (--disable_tqdm inverts it)
  std::optional<int> eval_interval;  // None: no evaluation
  int eval_iters = -1;               // -1: the whole validation set
  std::string output_dir = "megatron_output";
  bool log_throughput = false;
  bool report = true;            // the last rank writes <output_dir>/report.html at the end (lib/report)
  int num_generate_samples = 0;  // after training: answer the first N training prompts (greedy)
  int max_new_tokens = 64;
  std::string device_profile = "Ascend910B3";  // configs/devices/<name>.yaml or a path
  bool dry_run = false;                        // lib/plan: memory plan, no training
  bool json = false;                           // with dry_run: the report as JSON
  std::optional<int> dry_run_samples;          // with dry_run (sft): tokenize at most N samples of each --dataset
  std::optional<std::string>
      dry_run_lengths;  // with dry_run (sft, no --dataset): the rows' lengths (plan/dry_run_lengths.h)
  // The launch's world (torchrun's flags), over NNODES / NPROC_PER_NODE; read
  // by the launcher before any rank exists (apps/mtrain/launch/launch_flags.h).
  std::optional<int> nnodes;
  std::optional<int> nproc_per_node;

  // ---- checkpointing (output_dir is --save) -------------------------------
  std::optional<std::string> load;  // --mcore_model: resume (or --finetune) from this directory
  int save_interval = 500;          // swift's --save_steps default; a checkpoint is always saved at the end
  bool no_save_optim = false;
  bool no_save_rng = false;
  bool no_load_optim = false;
  bool no_load_rng = false;
  bool finetune = false;  // load weights only; iteration, optimizer, data position start fresh
  bool exit_on_missing_checkpoint = false;
  std::optional<int> ckpt_step;                // load this iteration instead of the tracker's
  std::optional<int> save_total_limit;         // keep this many checkpoints (None: all)
  std::string on_save_error = "stop";          // stop | continue
  std::optional<double> save_timeout_minutes;  // None: --distributed_timeout_minutes
  std::string checkpoint_dir_mode = "0750";
  std::string checkpoint_file_mode = "0640";
  // Resume with another LR / weight-decay schedule: take this run's, or the checkpoint's.
  bool override_opt_param_scheduler = false;
  bool use_checkpoint_opt_param_scheduler = false;

  // ---- precision debugging (observe/precision_dump.h) -------------------------
  std::string precision_dump_path;                // empty: no dump
  std::string precision_dump_level = "L1";        // L0 (modules) | L1 (ops) | mix
  std::vector<std::string> precision_dump_steps;  // 1-based iterations; empty: all
  std::vector<std::string> precision_dump_ranks;  // global ranks; empty: all
  bool precision_dump_tensors = false;            // also write each tensor as .npy

  // ---- profiling (observe/profiler_hook.h) ------------------------------------
  bool profile = false;
  int profile_step_start = 10;  // skip_first: iterations start+1..end are profiled
  int profile_step_end = 12;
  std::vector<std::string> profile_ranks = {"-1"};  // global ranks; -1: all (MindSpeed)
  std::string profile_level = "level0";             // level0 | level1 | level2
  bool profile_with_cpu = false;
  bool profile_with_stack = false;
  bool profile_with_memory = false;
  bool profile_record_shapes = false;
  std::string profile_save_path = "./profile_dir";

  // ---- TensorBoard (observe/tensorboard_hook.h, config/tensorboard_args.h) ----
  std::optional<std::string> tensorboard_dir;            // None: <output_dir>/runs (swift)
  std::vector<std::string> report_to = {"tensorboard"};  // swift v4: tensorboard | none (| all)
  int tensorboard_log_interval = 1;                      // Megatron: scalars every N iterations
  int tensorboard_queue_size = 1000;                     // events queued before a write
  bool log_timers_to_tensorboard = false;                // iteration-time (+ throughput)
  bool log_memory_to_tensorboard = false;                // mem-*-bytes, npu-memory/<category>-bytes
  bool log_validation_ppl_to_tensorboard = false;        // lm loss validation ppl
  bool log_world_size_to_tensorboard = false;            // world-size
  bool log_loss_scale_to_tensorboard = true;             // loss-scale
  bool log_params_norm = false;                          // params norm (log line, params-norm)
  bool log_num_zeros_in_grad = false;                    // num zeros (log line, num-zeros)

  // ---- derived by validate() (not flags; written to args.json) -------------
  int world_size = 1;
  int data_parallel_size = 1;  // world_size / (TP * PP * CP)
  int num_micro_batches = 16;  // global_batch_size / (micro_batch_size * data_parallel_size)
};

}  // namespace mtrain::config
