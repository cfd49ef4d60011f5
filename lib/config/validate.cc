// Validation, part 1: the order of checks, the model shape and the data.
#include "config/validate.h"

#include <fmt/format.h>

#include "common/errors.h"
#include "config/precision_dump_args.h"
#include "config/profile_args.h"
#include "config/tensorboard_args.h"
#include "config/validate_parts.h"

namespace mtrain::config {

namespace detail {

void require_positive(int value, const char* flag) {
  if (value < 1) throw ConfigError(fmt::format("--{} must be >= 1, got {}", flag, value));
}

void require_range(double value, double lo, double hi, bool hi_inclusive, const char* flag) {
  bool ok = value >= lo && (hi_inclusive ? value <= hi : value < hi);
  if (!ok) {
    throw ConfigError(fmt::format("--{} must be in [{}, {}{}, got {}", flag, lo, hi, hi_inclusive ? "]" : ")", value));
  }
}

}  // namespace detail

namespace {

using detail::require_positive;
using detail::require_range;

void require_set(int value, const char* flag) {
  if (value == 0) {
    throw ConfigError(fmt::format("--{} is required", flag),
                      "set it with --model_preset (e.g. demo), in the YAML config or on the command line");
  }
  require_positive(value, flag);
}

void check_attention_shape(Args& a) {
  if (!a.kv_channels && a.hidden_size % a.num_attention_heads != 0) {
    throw ConfigError(fmt::format("hidden_size ({}) must be divisible by num_attention_heads ({}) when kv_channels "
                                  "is not set",
                                  a.hidden_size, a.num_attention_heads),
                      "change --hidden_size or --num_attention_heads, or set --kv_channels");
  }
  if (!a.kv_channels) a.kv_channels = a.hidden_size / a.num_attention_heads;
  require_positive(*a.kv_channels, "kv_channels");
  if (a.position_embedding_type == "rope" && *a.kv_channels % 2 != 0) {
    throw ConfigError(fmt::format("--kv_channels ({}) must be even with rope position embeddings", *a.kv_channels),
                      "RoPE rotates pairs of channels; change --hidden_size / --num_attention_heads or --kv_channels");
  }
  // swift derives group_query_attention from num_query_groups > 1; without it
  // attention is multi-head (Megatron ignores num_query_groups then).
  require_positive(a.num_query_groups, "num_query_groups");
  if (a.num_query_groups > 1) a.group_query_attention = true;
  if (!a.group_query_attention) a.num_query_groups = a.num_attention_heads;
  if (a.num_attention_heads % a.num_query_groups != 0) {
    throw ConfigError(fmt::format("num_attention_heads ({}) must be divisible by num_query_groups ({})",
                                  a.num_attention_heads, a.num_query_groups),
                      "each KV head serves a whole number of query heads: change --num_query_groups");
  }
  a.group_query_attention = a.num_query_groups < a.num_attention_heads;
}

void derive_lengths(Args& a) {
  if (!a.seq_length) a.seq_length = a.max_length ? a.max_length : a.max_position_embeddings;
  if (!a.seq_length) {
    throw ConfigError("--seq_length is required",
                      "set --seq_length or --max_length (or --max_position_embeddings, e.g. via --model_preset)");
  }
  require_positive(*a.seq_length, "seq_length");
  if (!a.max_length) a.max_length = a.seq_length;
  require_positive(*a.max_length, "max_length");
  if (*a.max_length > *a.seq_length) {
    throw ConfigError(fmt::format("--max_length ({}) must not exceed --seq_length ({})", *a.max_length, *a.seq_length),
                      "raise --seq_length or lower --max_length");
  }
  if (!a.max_position_embeddings) a.max_position_embeddings = a.seq_length;
  require_positive(*a.max_position_embeddings, "max_position_embeddings");
  if (a.position_embedding_type == "learned_absolute" && *a.max_position_embeddings < *a.seq_length) {
    throw ConfigError(fmt::format("max_position_embeddings ({}) must be greater than or equal to seq_length ({}).",
                                  *a.max_position_embeddings, *a.seq_length),
                      "learned position embeddings have one row per position: raise --max_position_embeddings "
                      "or lower --seq_length / --max_length");
  }
}

void check_model(Args& a) {
  require_set(a.num_layers, "num_layers");
  require_set(a.hidden_size, "hidden_size");
  require_set(a.num_attention_heads, "num_attention_heads");
  check_attention_shape(a);
  if (!a.ffn_hidden_size) {
    a.ffn_hidden_size = a.swiglu ? static_cast<int>((4.0 * a.hidden_size * 2 / 3) / 64) * 64 : 4 * a.hidden_size;
  }
  require_positive(*a.ffn_hidden_size, "ffn_hidden_size");
  derive_lengths(a);
  require_range(a.hidden_dropout, 0, 1, false, "hidden_dropout");
  require_range(a.attention_dropout, 0, 1, false, "attention_dropout");
  if (!(a.norm_epsilon > 0)) throw ConfigError(fmt::format("--norm_epsilon must be > 0, got {}", a.norm_epsilon));
  if (!(a.rotary_base > 0)) throw ConfigError(fmt::format("--rotary_base must be > 0, got {}", a.rotary_base));
  if (!(a.init_method_std > 0)) {
    throw ConfigError(fmt::format("--init_method_std must be > 0, got {}", a.init_method_std));
  }
  require_positive(a.make_vocab_size_divisible_by, "make_vocab_size_divisible_by");
  if (a.vocab_size) require_positive(*a.vocab_size, "vocab_size");
}

void check_kernels(Args& a) {
  if (a.attention_backend == "auto") a.attention_backend = "flash";
  if (a.attention_backend == "local") a.attention_backend = "unfused";
  if (a.use_flash_attn && a.attention_backend != "flash") {
    throw ConfigError(fmt::format("--use_flash_attn conflicts with --attention_backend {}", a.attention_backend),
                      "--use_flash_attn means --attention_backend flash; drop one of them");
  }
}

void check_data(Args& a) {
  require_range(a.split_dataset_ratio, 0, 1, false, "split_dataset_ratio");
  if (!a.loss_scale) a.loss_scale = a.command == "pt" ? "all" : "default";
  if (a.text_key.empty()) throw ConfigError("--text_key must not be empty");
  if (a.max_malformed < 0) throw ConfigError(fmt::format("--max_malformed must be >= 0, got {}", a.max_malformed));
  if (a.packing && a.command == "pt") {
    throw ConfigError("--packing applies to `mtrain sft`", "pt already fills every row with seq_length tokens");
  }
}

void check_logging(Args& a) {
  require_positive(a.log_interval, "log_interval");
  if (a.eval_interval && *a.eval_interval < 0)
    throw ConfigError(fmt::format("--eval_interval must be >= 0, got {}", *a.eval_interval),
                      "0 (or leaving it unset) means no evaluation");
  if (a.eval_iters < -1) {
    throw ConfigError(
        fmt::format("--eval_iters must be -1 (whole validation set), 0 (no evaluation) or >= 1, got {}", a.eval_iters));
  }
  // Megatron: `if args.eval_interval and ...` and an empty valid split for
  // --eval_iters 0 both mean no evaluation, so a job file's evaluation can be
  // switched off from the command line. One spelling downstream: None.
  if (a.eval_interval == 0 || a.eval_iters == 0) a.eval_interval.reset();
  if (a.output_dir.empty()) throw ConfigError("--output_dir must not be empty");
  if (a.device_profile.empty()) throw ConfigError("--device_profile must not be empty");
  if (a.num_threads) require_positive(*a.num_threads, "num_threads");
  if (a.num_generate_samples < 0) {
    throw ConfigError(fmt::format("--num_generate_samples must be >= 0, got {}", a.num_generate_samples));
  }
  if (a.num_generate_samples > 0 && a.command == "pt") {
    throw ConfigError("--num_generate_samples needs chat prompts and works with `mtrain sft` only",
                      "drop --num_generate_samples for pretraining");
  }
  require_positive(a.max_new_tokens, "max_new_tokens");
}

// An octal permission string ("0750"); never world-writable, and the owner
// must keep what a save needs (rwx on directories, rw on files).
void check_mode(const std::string& text, const char* flag, unsigned owner_needs) {
  unsigned mode = 0;
  bool ok = !text.empty() && text.size() <= 4;
  for (char c : text) {
    ok = ok && c >= '0' && c <= '7';
    mode = mode * 8 + static_cast<unsigned>(c - '0');
  }
  if (!ok) throw ConfigError(fmt::format("--{} {}: not an octal permission mode", flag, text), "e.g. 0750");
  if (mode & 02)
    throw ConfigError(fmt::format("--{} {}: checkpoints must never be world-writable", flag, text),
                      "drop the write bit for others, e.g. 0750 / 0640");
  if ((mode & owner_needs) != owner_needs)
    throw ConfigError(fmt::format("--{} {}: the owner needs {} to save and load checkpoints", flag, text,
                                  owner_needs == 0700 ? "rwx on directories" : "rw on files"));
}

void check_checkpointing(Args& a) {
  require_positive(a.save_interval, "save_interval");
  if (a.save_total_limit) require_positive(*a.save_total_limit, "save_total_limit");
  if (a.ckpt_step && *a.ckpt_step < 0) throw ConfigError(fmt::format("--ckpt_step must be >= 0, got {}", *a.ckpt_step));
  if (a.ckpt_step && !a.load) throw ConfigError("--ckpt_step needs --load", "name the directory to load from");
  if (a.finetune && !a.load && !a.model)
    throw ConfigError("--finetune needs --load (or --model)", "name the checkpoint whose weights to start from");
  if (a.load && a.load->empty()) throw ConfigError("--load must not be empty");
  // Megatron's OptimizerParamScheduler asserts the same.
  if (a.override_opt_param_scheduler && a.use_checkpoint_opt_param_scheduler)
    throw ConfigError("both override and use-checkpoint are set.",
                      "pass either --override_opt_param_scheduler (this run's schedule) or "
                      "--use_checkpoint_opt_param_scheduler (the checkpoint's), not both");
  if (a.save_timeout_minutes && !(*a.save_timeout_minutes > 0))
    throw ConfigError(fmt::format("--save_timeout_minutes must be > 0, got {}", *a.save_timeout_minutes));
  check_mode(a.checkpoint_dir_mode, "checkpoint_dir_mode", 0700);
  check_mode(a.checkpoint_file_mode, "checkpoint_file_mode", 0600);
}

}  // namespace

std::vector<std::string> validate(Args& args, int world_size) {
  std::vector<std::string> warnings;
  check_model(args);
  check_kernels(args);
  detail::check_parallel(args, world_size, warnings);
  detail::check_lora(args);
  detail::check_moe(args, warnings);
  detail::check_moe_router(args);
  detail::check_training(args, warnings);
  check_data(args);
  check_logging(args);
  check_tensorboard(args);
  check_checkpointing(args);
  check_precision_dump(args, world_size, warnings);
  check_profile(args, world_size);
  // Last: a setting that is wrong in itself gets Megatron's message first.
  check_supported(args);
  return warnings;
}

int padded_vocab_size(int vocab_size, int make_vocab_size_divisible_by, int tensor_model_parallel_size) {
  if (vocab_size < 1 || make_vocab_size_divisible_by < 1 || tensor_model_parallel_size < 1) {
    throw ConfigError(
        fmt::format("cannot pad vocab size {} with make_vocab_size_divisible_by {} and "
                    "tensor_model_parallel_size {}",
                    vocab_size, make_vocab_size_divisible_by, tensor_model_parallel_size));
  }
  const int multiple = make_vocab_size_divisible_by * tensor_model_parallel_size;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

}  // namespace mtrain::config
