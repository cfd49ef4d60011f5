// Loss scaling for fp16 training, matching Megatron's
// megatron/core/optimizer/grad_scaler.py.
//
// The loss is multiplied by scale() before backward; the caller then unscales
// the fp32 grads (unscale_grads, by inv_scale = fp32(1 / double(scale)), like
// Megatron), checks them (found_inf; all-reduce the flag with MAX over the
// model-parallel group when distributed), calls update(found_inf), and skips
// the optimizer step (and the LR scheduler step, and the grad norm) if it was
// found. The scale is kept in fp32, as Megatron keeps it in a float tensor.
//
// Dynamic scaler semantics (hysteresis tracker):
//  - inf/nan: growth tracker := 0, hysteresis tracker -= 1; if the hysteresis
//    tracker is <= 0 the scale backs off (max(scale * backoff, min_scale)).
//    A clean step does NOT restore the hysteresis tracker, so after the first
//    back-off every further overflow backs off again until the next growth.
//  - clean step: growth tracker += 1; when it reaches growth_interval the
//    scale grows by growth_factor and both trackers reset.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace mtrain::optim {

class GradScaler {
 public:
  virtual ~GradScaler() = default;
  virtual double scale() const = 0;
  virtual void update(bool found_inf) = 0;
  // fp32(1 / double(scale)), exactly what Megatron multiplies the grads by.
  float inv_scale() const;
};

// --loss-scale S: never changes.
class ConstantGradScaler final : public GradScaler {
 public:
  explicit ConstantGradScaler(double scale);  // throws ConfigError unless scale > 0
  double scale() const override { return scale_; }
  void update(bool) override {}

 private:
  float scale_;
};

struct DynamicGradScalerConfig {
  double initial_scale = 4294967296.0;  // --initial-loss-scale 2**32
  double min_scale = 1.0;               // --min-loss-scale
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 1000;  // --loss-scale-window
  int64_t hysteresis = 2;          // --hysteresis
};

// Checkpointable state (Megatron's state_dict keys: scale, growth_tracker, hysteresis_tracker).
struct DynamicGradScalerState {
  float scale = 0.0f;
  int64_t growth_tracker = 0;
  int64_t hysteresis_tracker = 0;
};

class DynamicGradScaler final : public GradScaler {
 public:
  explicit DynamicGradScaler(const DynamicGradScalerConfig& cfg);  // validates like Megatron's asserts
  double scale() const override { return scale_; }
  void update(bool found_inf) override;

  DynamicGradScalerState state() const { return {scale_, growth_tracker_, hysteresis_tracker_}; }
  void load_state(const DynamicGradScalerState& s);

 private:
  float scale_;
  float min_scale_;
  float growth_factor_;
  float backoff_factor_;
  int64_t growth_interval_;
  int64_t hysteresis_;
  int64_t growth_tracker_ = 0;
  int64_t hysteresis_tracker_;
};

// Megatron's choice (get_megatron_optimizer): --loss-scale S > 0 -> constant S
// (fp16 or bf16); otherwise fp16 -> dynamic; otherwise (fp32, bf16) nullptr:
// loss scale 1, no overflow check, the step is never skipped.
std::unique_ptr<GradScaler> make_grad_scaler(DType model_dtype, double loss_scale,
                                             const DynamicGradScalerConfig& dynamic);

// Megatron's fused unscale-and-check (torch's _amp_foreach_non_finite_check_and_unscale_)
// over the [begin, end) intervals of grads: each element multiplied by
// inv_scale in place, true if any result is NaN or +-Inf. One kernel region,
// "unscale_and_check_inf": 8 bytes (fp32 read and write) and 2 flops
// (multiply, test) per element; in a dry run's shape-only step it touches
// nothing and finds no overflow.
bool unscale_and_find_inf(float* grads, const std::vector<std::pair<int64_t, int64_t>>& intervals, float inv_scale);
// True if any of grads (n) is NaN or +-Inf.
bool found_inf(const float* grads, int64_t n);
// grads (n) *= inv_scale, in place.
void unscale_grads(float* grads, int64_t n, float inv_scale);

}  // namespace mtrain::optim
