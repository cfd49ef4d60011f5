// Learning-rate schedule: a faithful port of Megatron-LM's
// OptimizerParamScheduler.get_lr (megatron/core/optimizer_param_scheduler.py).
//
// Megatron counts scheduler "steps" in samples: after every *successful*
// optimizer step it calls scheduler.step(increment = global batch size), and
// lr_warmup_steps / lr_decay_steps / wsd_decay_steps are the iteration counts
// multiplied by the global batch size (or, for --lr-warmup-fraction,
// fraction * lr_decay_steps, not truncated). mtrain counts iterations; set
// `samples_per_iteration` to the global batch size to reproduce Megatron's
// values bit for bit (it can change the last ulp of warmup and
// inverse-square-root values; decay ratios are exact quotients either way).
//
// Index convention (Megatron training.py): the scheduler is built with
// step(0), and train_step calls optimizer.step() *then*, only if the update
// succeeded (no fp16 overflow), scheduler.step(global_batch_size). So with k
// successful updates before iteration i (1-based; k = i - 1 without skips):
//   - the update of iteration i uses      lr_at(k)      (iteration 1: lr_at(0),
//     i.e. lr_warmup_init when warming up);
//   - the "learning rate:" printed on the log line of iteration i is read after
//     the scheduler stepped:              lr_at(k + 1)  (the next step's lr;
//     lr_at(k) again if iteration i was skipped).
// A skipped iteration does not advance the schedule.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace mtrain::optim {

struct LrScheduleConfig {
  double lr = 0.0;                              // --lr (max_lr)
  double min_lr = 0.0;                          // --min-lr
  double lr_warmup_init = 0.0;                  // --lr-warmup-init (init_lr)
  int64_t warmup_iters = 0;                     // --lr-warmup-iters (ignored when warmup_fraction is set)
  std::optional<double> warmup_fraction;        // --lr-warmup-fraction
  int64_t decay_iters = 0;                      // --lr-decay-iters (defaults to train_iters upstream)
  std::string style = "linear";                 // constant | linear | cosine | inverse-square-root | WSD
  int64_t wsd_decay_iters = 0;                  // --lr-wsd-decay-iters (WSD only)
  std::string wsd_decay_style = "exponential";  // exponential | linear | cosine | minus_sqrt
  int64_t samples_per_iteration = 1;            // global batch size; Megatron's scheduler unit
};

// Megatron's warmup length for --lr-warmup-fraction, in iterations. Fractional
// on purpose: Megatron does not round fraction * lr_decay_steps.
double warmup_iters_from_fraction(double lr_warmup_fraction, int64_t decay_iters);

class LrScheduler {
 public:
  // Validates like Megatron's constructor asserts; throws ConfigError naming the flag.
  explicit LrScheduler(LrScheduleConfig cfg);

  // Learning rate after `completed_steps` successful optimizer steps (Megatron's
  // num_steps / samples_per_iteration). Pure; no state.
  double lr_at(int64_t completed_steps) const;

  const LrScheduleConfig& config() const { return cfg_; }
  double warmup_steps() const { return warmup_steps_; }  // in samples, as Megatron stores it

 private:
  enum class Style { kConstant, kLinear, kCosine, kInverseSqrt, kWsd };
  enum class WsdStyle { kExponential, kLinear, kCosine, kMinusSqrt };
  static Style parse_style(const std::string& s);
  static WsdStyle parse_wsd_style(const std::string& s);
  double wsd_coeff(int64_t num_steps) const;

  LrScheduleConfig cfg_;
  Style style_ = Style::kLinear;
  WsdStyle wsd_style_ = WsdStyle::kExponential;
  double warmup_steps_ = 0.0;  // lr_warmup_steps (samples); float when from a fraction
  int64_t decay_steps_ = 0;    // lr_decay_steps (samples)
  int64_t wsd_decay_steps_ = 0;
};

}  // namespace mtrain::optim
