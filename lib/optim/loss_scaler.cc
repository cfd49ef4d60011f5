#include "optim/loss_scaler.h"

#include <algorithm>
#include <bit>
#include <string>

#include "common/errors.h"
#include "profiler/kernel_region.h"
#include "tensor/precision.h"

namespace mtrain::optim {

float GradScaler::inv_scale() const { return static_cast<float>(1.0 / scale()); }

ConstantGradScaler::ConstantGradScaler(double scale) : scale_(static_cast<float>(scale)) {
  if (!(scale > 0.0)) throw ConfigError("--loss-scale must be > 0, got " + std::to_string(scale));
}

DynamicGradScaler::DynamicGradScaler(const DynamicGradScalerConfig& cfg)
    : scale_(static_cast<float>(cfg.initial_scale)),
      min_scale_(static_cast<float>(cfg.min_scale)),
      growth_factor_(static_cast<float>(cfg.growth_factor)),
      backoff_factor_(static_cast<float>(cfg.backoff_factor)),
      growth_interval_(cfg.growth_interval),
      hysteresis_(cfg.hysteresis),
      hysteresis_tracker_(cfg.hysteresis) {
  if (!(cfg.initial_scale > 0.0)) throw ConfigError("--initial-loss-scale must be > 0");
  if (!(cfg.min_scale > 0.0)) throw ConfigError("--min-loss-scale must be > 0");
  if (!(cfg.min_scale <= cfg.initial_scale)) {
    throw ConfigError("--min-loss-scale (" + std::to_string(cfg.min_scale) + ") must be <= --initial-loss-scale (" +
                      std::to_string(cfg.initial_scale) + ")");
  }
  if (!(cfg.growth_factor > 1.0)) throw ConfigError("loss-scale growth factor must be > 1");
  if (!(cfg.backoff_factor > 0.0 && cfg.backoff_factor < 1.0)) {
    throw ConfigError("loss-scale backoff factor must be in (0, 1)");
  }
  if (cfg.growth_interval <= 0) throw ConfigError("--loss-scale-window must be > 0");
  if (cfg.hysteresis <= 0) throw ConfigError("--hysteresis must be > 0");
}

void DynamicGradScaler::update(bool found_inf) {
  if (found_inf) {
    growth_tracker_ = 0;
    hysteresis_tracker_ -= 1;
    if (hysteresis_tracker_ <= 0) scale_ = std::max(scale_ * backoff_factor_, min_scale_);
    return;
  }
  growth_tracker_ += 1;
  if (growth_tracker_ == growth_interval_) {
    growth_tracker_ = 0;
    hysteresis_tracker_ = hysteresis_;
    scale_ = scale_ * growth_factor_;
  }
}

void DynamicGradScaler::load_state(const DynamicGradScalerState& s) {
  scale_ = s.scale;
  growth_tracker_ = s.growth_tracker;
  hysteresis_tracker_ = s.hysteresis_tracker;
}

std::unique_ptr<GradScaler> make_grad_scaler(DType model_dtype, double loss_scale,
                                             const DynamicGradScalerConfig& dynamic) {
  if (model_dtype == DType::kF32) return nullptr;
  if (loss_scale > 0.0) return std::make_unique<ConstantGradScaler>(loss_scale);
  if (model_dtype == DType::kF16) return std::make_unique<DynamicGradScaler>(dynamic);
  return nullptr;
}

bool found_inf(const float* grads, int64_t n) { return !kernels::all_finite(grads, n); }

void unscale_grads(float* grads, int64_t n, float inv_scale) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) grads[i] *= inv_scale;
}

bool unscale_and_find_inf(float* grads, const std::vector<std::pair<int64_t, int64_t>>& intervals, float inv_scale) {
  double n = 0;
  for (const auto& [b, e] : intervals) n += static_cast<double>(e - b);
  profiler::Scope kernel(profiler::memory_kernel("unscale_and_check_inf", 8 * n, 2 * n));
  if (profiler::shape_only()) return false;
  constexpr uint32_t kInfBits = 0x7f800000u;  // exponent all ones: Inf or NaN
  int64_t bad = 0;
  for (const auto& [b, e] : intervals) {
    float* g = grads + b;
    const int64_t len = e - b;
#pragma omp parallel for simd schedule(static) reduction(+ : bad)
    for (int64_t i = 0; i < len; ++i) {
      g[i] *= inv_scale;
      bad += (std::bit_cast<uint32_t>(g[i]) & kInfBits) == kInfBits ? 1 : 0;
    }
  }
  return bad != 0;
}

}  // namespace mtrain::optim
