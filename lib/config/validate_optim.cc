// Validation, part 3: iterations, learning-rate schedule, optimizer, precision.
#include <fmt/format.h>

#include <string>

#include "common/errors.h"
#include "config/validate.h"
#include "config/validate_parts.h"

namespace mtrain::config {

namespace detail {

namespace {

void require_nonnegative(double v, const char* flag) {
  if (!(v >= 0)) throw ConfigError(fmt::format("--{} must be >= 0, got {}", flag, v));
}

void check_schedule(Args& a) {
  if (!a.train_iters && !a.num_train_epochs) {
    throw ConfigError("one of --train_iters and --num_train_epochs is required",
                      "e.g. --train_iters 100 (or --num_train_epochs 1, also spelled --max_epochs)");
  }
  if (a.train_iters) require_positive(*a.train_iters, "train_iters");
  if (a.num_train_epochs) require_positive(*a.num_train_epochs, "num_train_epochs");
  if (!a.lr) a.lr = 1e-5;  // swift: 1e-5 for full fine-tuning (1e-4 for LoRA)
  if (!(*a.lr > 0)) throw ConfigError(fmt::format("--lr must be > 0, got {}", *a.lr));
  require_nonnegative(a.min_lr, "min_lr");
  if (a.min_lr > *a.lr) {
    throw ConfigError(fmt::format("--min_lr ({}) must not exceed --lr ({})", a.min_lr, *a.lr));
  }
  require_nonnegative(a.lr_warmup_init, "lr_warmup_init");
  if (a.lr_warmup_iters < 0)
    throw ConfigError(fmt::format("--lr_warmup_iters must be >= 0, got {}", a.lr_warmup_iters));
  if (a.lr_warmup_fraction) {
    if (a.lr_warmup_iters != 0) {
      throw ConfigError("can only specify one of lr-warmup-fraction and lr-warmup-iters",
                        "remove --lr_warmup_fraction or --lr_warmup_iters");
    }
    require_range(*a.lr_warmup_fraction, 0, 1, true, "lr_warmup_fraction");
  }
  if (a.lr_decay_style == "WSD") {
    if (!a.lr_wsd_decay_iters) {
      throw ConfigError("--lr_wsd_decay_iters is required with --lr_decay_style WSD",
                        "the length of the final decay phase, e.g. 10% of train_iters");
    }
    require_positive(*a.lr_wsd_decay_iters, "lr_wsd_decay_iters");
  }
  check_schedule_lengths(a);
}

void check_optimizer(const Args& a) {
  require_nonnegative(a.weight_decay, "weight_decay");
  require_nonnegative(a.clip_grad, "clip_grad");
  require_range(a.adam_beta1, 0, 1, false, "adam_beta1");
  require_range(a.adam_beta2, 0, 1, false, "adam_beta2");
  if (!(a.adam_eps > 0)) throw ConfigError(fmt::format("--adam_eps must be > 0, got {}", a.adam_eps));
  require_range(a.sgd_momentum, 0, 1, false, "sgd_momentum");
}

void check_precision(const Args& a, std::vector<std::string>& warnings) {
  if (a.fp16 && a.bf16) {
    throw ConfigError("fp16 and bf16 cannot both be set", "choose one of --fp16 or --bf16");
  }
  // Megatron reads the flag under --bf16 only (arguments.py); elsewhere it would be ignored.
  if (a.grad_reduce_in_bf16 && !a.bf16)
    throw ConfigError(
        "--grad_reduce_in_bf16 needs --bf16: it keeps and reduces the bf16 model's main gradients in bf16",
        "add --bf16, or drop --grad_reduce_in_bf16");
  if (!(a.initial_loss_scale > 0)) {
    throw ConfigError(fmt::format("--initial_loss_scale must be > 0, got {}", a.initial_loss_scale));
  }
  if (!(a.min_loss_scale > 0) || a.min_loss_scale > a.initial_loss_scale) {
    throw ConfigError(fmt::format("--min_loss_scale must be > 0 and at most --initial_loss_scale ({}), got {}",
                                  a.initial_loss_scale, a.min_loss_scale));
  }
  require_positive(a.loss_scale_window, "loss_scale_window");
  require_positive(a.hysteresis, "hysteresis");
  if (a.static_loss_scale) {
    if (!(*a.static_loss_scale > 0)) {
      throw ConfigError(
          fmt::format("the static fp16 loss scale (--loss_scale NUMBER) must be > 0, got {}", *a.static_loss_scale));
    }
    if (!a.fp16) warnings.emplace_back("a static loss scale only applies with --fp16; it is ignored");
  }
  require_positive(a.max_consecutive_nonfinite_skips, "max_consecutive_nonfinite_skips");
}

}  // namespace

// Rules that need lr_decay_iters (known once train_iters is).
void check_schedule_lengths(Args& a) {
  const bool decay_from_train_iters = !a.lr_decay_iters && a.train_iters;
  if (decay_from_train_iters) a.lr_decay_iters = a.train_iters;
  if (!a.lr_decay_iters) return;
  require_positive(*a.lr_decay_iters, "lr_decay_iters");
  // Megatron asserts the same (lr_warmup_steps < lr_decay_steps). The warmup
  // often comes from a YAML job written for a long run, shortened on the command line.
  if (a.lr_warmup_iters > 0 && a.lr_warmup_iters >= *a.lr_decay_iters) {
    const std::string decay = decay_from_train_iters
                                  ? fmt::format("--lr_decay_iters defaults to --train_iters ({})", *a.lr_decay_iters)
                                  : fmt::format("--lr_decay_iters is {}", *a.lr_decay_iters);
    throw ConfigError(fmt::format("--lr_warmup_iters ({}) must be smaller than --lr_decay_iters ({})",
                                  a.lr_warmup_iters, *a.lr_decay_iters),
                      fmt::format("the warmup is --lr_warmup_iters (YAML key lr_warmup_iters: {}) and {}: pass "
                                  "--lr_warmup_iters N with N < {} (--lr_warmup_iters 0: no warmup), or raise {} "
                                  "above {}",
                                  a.lr_warmup_iters, decay, *a.lr_decay_iters,
                                  decay_from_train_iters ? "--train_iters" : "--lr_decay_iters", a.lr_warmup_iters));
  }
  if (a.lr_decay_style == "WSD" && *a.lr_wsd_decay_iters > *a.lr_decay_iters) {
    throw ConfigError(fmt::format("--lr_wsd_decay_iters ({}) must not exceed --lr_decay_iters ({})",
                                  *a.lr_wsd_decay_iters, *a.lr_decay_iters));
  }
}

void check_training(Args& a, std::vector<std::string>& warnings) {
  check_schedule(a);
  check_optimizer(a);
  check_precision(a, warnings);
}

}  // namespace detail

void set_train_iters(Args& args, int train_iters) {
  detail::require_positive(train_iters, "train_iters");
  args.train_iters = train_iters;
  detail::check_schedule_lengths(args);
}

}  // namespace mtrain::config
