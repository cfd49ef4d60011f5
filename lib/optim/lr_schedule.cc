#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "common/errors.h"

namespace mtrain::optim {

namespace {

std::string num(double x) { return std::to_string(x); }

}  // namespace

LrScheduler::Style LrScheduler::parse_style(const std::string& s) {
  if (s == "constant") return Style::kConstant;
  if (s == "linear") return Style::kLinear;
  if (s == "cosine") return Style::kCosine;
  if (s == "inverse-square-root") return Style::kInverseSqrt;
  if (s == "WSD") return Style::kWsd;
  throw ConfigError("--lr-decay-style: unknown style '" + s + "'",
                    "choose one of constant, linear, cosine, inverse-square-root, WSD");
}

LrScheduler::WsdStyle LrScheduler::parse_wsd_style(const std::string& s) {
  if (s == "exponential") return WsdStyle::kExponential;
  if (s == "linear") return WsdStyle::kLinear;
  if (s == "cosine") return WsdStyle::kCosine;
  if (s == "minus_sqrt") return WsdStyle::kMinusSqrt;
  throw ConfigError("--lr-wsd-decay-style: unknown style '" + s + "'",
                    "choose one of exponential, linear, cosine, minus_sqrt");
}

double warmup_iters_from_fraction(double lr_warmup_fraction, int64_t decay_iters) {
  return lr_warmup_fraction * static_cast<double>(decay_iters);
}

LrScheduler::LrScheduler(LrScheduleConfig cfg) : cfg_(std::move(cfg)) {
  const int64_t spi = cfg_.samples_per_iteration;
  if (spi < 1) throw ConfigError("LR schedule: samples per iteration must be >= 1, got " + std::to_string(spi));
  style_ = parse_style(cfg_.style);
  if (style_ == Style::kWsd) wsd_style_ = parse_wsd_style(cfg_.wsd_decay_style);
  if (cfg_.min_lr < 0.0) throw ConfigError("--min-lr must be >= 0, got " + num(cfg_.min_lr));
  if (cfg_.lr < cfg_.min_lr) {
    throw ConfigError("--lr (" + num(cfg_.lr) + ") must be >= --min-lr (" + num(cfg_.min_lr) + ")");
  }
  if (cfg_.lr_warmup_init > cfg_.lr) {
    throw ConfigError("--lr-warmup-init (" + num(cfg_.lr_warmup_init) + ") must be <= --lr (" + num(cfg_.lr) + ")");
  }
  if (cfg_.decay_iters <= 0) {
    throw ConfigError("--lr-decay-iters must be > 0, got " + std::to_string(cfg_.decay_iters),
                      "set --lr-decay-iters or --train-iters");
  }
  decay_steps_ = cfg_.decay_iters * spi;
  if (cfg_.warmup_fraction) {
    warmup_steps_ = *cfg_.warmup_fraction * static_cast<double>(decay_steps_);
  } else {
    warmup_steps_ = static_cast<double>(cfg_.warmup_iters * spi);
  }
  if (warmup_steps_ < 0.0) throw ConfigError("LR warmup must be >= 0 iterations");
  if (!(warmup_steps_ < static_cast<double>(decay_steps_))) {
    throw ConfigError("LR warmup (" + num(warmup_steps_ / spi) +
                          " iterations) must be shorter than --lr-decay-iters (" + std::to_string(cfg_.decay_iters) +
                          ")",
                      "lower --lr-warmup-iters / --lr-warmup-fraction or raise --lr-decay-iters");
  }
  if (style_ == Style::kWsd && cfg_.wsd_decay_iters < 0) {
    throw ConfigError("--lr-wsd-decay-iters must be >= 0, got " + std::to_string(cfg_.wsd_decay_iters));
  }
  wsd_decay_steps_ = cfg_.wsd_decay_iters * spi;
}

// Mirrors get_lr line by line, including the order of floating-point operations.
double LrScheduler::lr_at(int64_t completed_steps) const {
  const int64_t num_steps = completed_steps * cfg_.samples_per_iteration;
  const double steps = static_cast<double>(num_steps);
  const double max_lr = cfg_.lr;
  const double min_lr = cfg_.min_lr;

  if (warmup_steps_ > 0.0 && steps <= warmup_steps_) {
    return cfg_.lr_warmup_init + (max_lr - cfg_.lr_warmup_init) * steps / warmup_steps_;
  }
  if (style_ == Style::kConstant) return max_lr;
  if (num_steps > decay_steps_) return min_lr;

  if (style_ == Style::kInverseSqrt) {
    const double warmup = std::max(warmup_steps_, 1.0);
    const double n = static_cast<double>(std::max<int64_t>(num_steps, 1));
    const double lr = max_lr * std::pow(warmup, 0.5) / std::pow(n, 0.5);
    return std::max(min_lr, lr);
  }

  const double decay_ratio = (steps - warmup_steps_) / (static_cast<double>(decay_steps_) - warmup_steps_);
  const double delta_lr = max_lr - min_lr;
  double coeff = 0.0;
  if (style_ == Style::kLinear) {
    coeff = 1.0 - decay_ratio;
  } else if (style_ == Style::kCosine) {
    coeff = 0.5 * (std::cos(std::numbers::pi * decay_ratio) + 1.0);
  } else {
    coeff = wsd_coeff(num_steps);
  }
  return min_lr + coeff * delta_lr;
}

double LrScheduler::wsd_coeff(int64_t num_steps) const {
  const int64_t anneal_start = decay_steps_ - wsd_decay_steps_;
  if (num_steps <= anneal_start) return 1.0;
  const double ratio = static_cast<double>(num_steps - anneal_start) / static_cast<double>(wsd_decay_steps_);
  switch (wsd_style_) {
    case WsdStyle::kLinear:
      return 1.0 - ratio;
    case WsdStyle::kCosine:
      return 0.5 * (std::cos(std::numbers::pi * ratio) + 1.0);
    case WsdStyle::kExponential:
      return 2.0 * std::pow(0.5, ratio) - 1.0;
    case WsdStyle::kMinusSqrt:
      return 1.0 - std::sqrt(ratio);
  }
  return 1.0;
}

}  // namespace mtrain::optim
