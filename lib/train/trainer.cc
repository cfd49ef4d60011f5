#include "train/trainer.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>

#include "common/errors.h"
#include "common/rng.h"
#include "model/model_config.h"
#include "optim/grad_clip.h"
#include "optim/loss_scaler.h"
#include "tensor/precision.h"

namespace mtrain::train {

model::TokenBatch token_batch(const data::Batch& b) {
  model::TokenBatch t;
  t.B = b.B;
  t.T = b.T;
  t.tokens = b.tokens.data();
  t.targets = b.targets.data();
  t.positions = b.positions.data();
  t.doc_ids = b.doc_ids.empty() ? nullptr : b.doc_ids.data();
  return t;
}

std::vector<optim::ParamRange> optimizer_ranges(const model::ParamStore& ps) {
  std::vector<optim::ParamRange> r;
  for (const model::ParamInfo& p : ps.infos()) r.push_back({p.name, p.offset, p.numel, p.weight_decay});
  return r;
}

static double weighted_loss(const float* losses, const std::vector<float>& w) {
  double s = 0;
  for (size_t i = 0; i < w.size(); ++i)
    if (w[i] != 0.f) s += static_cast<double>(w[i]) * losses[i];
  return s;
}

// NaN prints as "nan" whatever its sign bit.
static std::string show(double v) { return std::isnan(v) ? "nan" : fmt::format("{}", v); }

static double weight_sum(const data::Batch& b) {
  double s = 0;
  for (float w : b.loss_weights) s += w;
  return s;
}

static double weight_sum(const std::vector<data::Batch>& batches) {
  double s = 0;
  for (const auto& b : batches) s += weight_sum(b);
  return s;
}

Trainer::Trainer(TrainerOptions opts, model::GptModel& model, optim::Optimizer& optimizer,
                 optim::LrScheduler& scheduler, optim::GradScaler* scaler, BatchSource& train_data,
                 const std::vector<data::Batch>* val_batches, HookList& hooks)
    : opts_(opts),
      model_(model),
      optimizer_(optimizer),
      scheduler_(scheduler),
      scaler_(scaler),
      train_data_(train_data),
      val_batches_(val_batches),
      hooks_(hooks) {}

void Trainer::train() {
  TrainInfo info;
  info.start_iteration = iteration_;
  info.train_iters = opts_.train_iters;
  info.num_params = model_.params().numel();
  info.model_description = model::describe(model_.config());
  hooks_.train_begin(info);
  while (iteration_ < opts_.train_iters) {
    hooks_.step_begin(iteration_ + 1);
    StepMetrics m = train_step();
    hooks_.step_end(m);
    if (eval_enabled() && iteration_ % opts_.eval_interval == 0) {
      hooks_.eval_end(EvalMetrics{iteration_, evaluate(*val_batches_), false});
    }
  }
  hooks_.train_end(info);
  // Megatron evaluates once more after training is done.
  if (eval_enabled() && iteration_ > info.start_iteration) {
    hooks_.eval_end(EvalMetrics{iteration_, evaluate(*val_batches_), true});
  }
}

StepMetrics Trainer::train_step() {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t it = iteration_ + 1;
  std::vector<data::Batch> micro = train_data_.next_global_batch();
  const double loss_tokens = weight_sum(micro);
  const double scale = scaler_ ? scaler_->scale() : 1.0;
  model::ParamStore& ps = model_.params();
  // The first micro-batch's backward zeroes each gradient just before its
  // first contribution (no separate sweep over the buffer).
  if (micro.empty()) ps.grads().zero();

  double loss_sum = 0;
  int64_t tokens = 0;
  for (size_t mb = 0; mb < micro.size(); ++mb) {
    const data::Batch& b = micro[mb];
    const model::TokenBatch tb = token_batch(b);
    const uint64_t seed = stream_seed(opts_.seed, static_cast<uint64_t>(it), mb);
    model_.forward(tb, seed, /*training=*/true);
    loss_sum += weighted_loss(model_.losses(), b.loss_weights);
    // d(total loss)/d(token loss) for the global per-token mean, times the fp16 loss scale.
    dloss_.resize(b.loss_weights.size());
    const double k = loss_tokens > 0 ? scale / loss_tokens : 0.0;
    for (size_t i = 0; i < dloss_.size(); ++i) dloss_[i] = static_cast<float>(b.loss_weights[i] * k);
    model_.backward(tb, dloss_.data(), seed, /*training=*/true, /*zero_grads=*/mb == 0);
    tokens += b.B * b.T;
  }
  const double lm_loss = loss_tokens > 0 ? loss_sum / loss_tokens : 0.0;

  float* grads = ps.grads().data();
  const int64_t n = ps.numel();
  StepMetrics m;
  bool skip = false;
  double grad_norm = 0;
  if (scaler_) {
    // Megatron's order: unscale, check the grads for overflow, update the
    // scaler; on overflow the step (and the lr schedule) is skipped.
    optim::unscale_grads(grads, n, scaler_->inv_scale());
    const bool overflow = optim::found_inf(grads, n);
    scaler_->update(overflow);
    skip = overflow;
    if (!skip) grad_norm = optim::grad_norm(grads, n);
  } else {
    grad_norm = optim::grad_norm(grads, n);
  }
  const bool finite = std::isfinite(lm_loss) && std::isfinite(grad_norm);
  if (!skip && !finite) {
    ++nan_total_;
    if (opts_.check_nonfinite && !opts_.skip_nonfinite) {
      throw NonFiniteError(
          fmt::format("iteration {}: {} is not finite (lm loss {}, grad norm {}); stopped before the optimizer step, "
                      "so the weights are those after iteration {}",
                      it, std::isfinite(lm_loss) ? "the gradient norm" : "the loss", show(lm_loss), show(grad_norm),
                      it - 1),
          "lower --lr, raise --lr_warmup_iters, use --bf16 instead of --fp16, or pass --on_nonfinite skip to skip "
          "such steps");
    }
    skip = opts_.check_nonfinite;
  }
  if (skip) {
    ++skipped_total_;
    // fp16 overflow skips are the loss scaler's normal business; only skips for
    // non-finite values (--on_nonfinite skip) count towards the cap.
    if (!scaler_ && ++consecutive_skips_ > opts_.max_consecutive_skips) {
      throw NonFiniteError(fmt::format("iteration {}: the loss or gradient norm is non-finite in {} consecutive "
                                       "iterations, more than --max_consecutive_nonfinite_skips {} allows",
                                       it, consecutive_skips_, opts_.max_consecutive_skips),
                           "the run has diverged; lower --lr or check the data");
    }
  } else {
    consecutive_skips_ = 0;
    // Clipping is applied inside the optimizer's pass (the same float product
    // as optim::clip_grads, without another sweep over the gradient buffer).
    const double clip_coeff = opts_.clip_grad > 0 ? optim::clip_coefficient(opts_.clip_grad, grad_norm) : 1.0;
    optimizer_.step(ps.params().data(), grads, scheduler_.lr_at(successful_steps_), clip_coeff);
    ++successful_steps_;
  }
  iteration_ = it;
  consumed_samples_ += train_data_.global_batch_samples();

  m.iteration = it;
  m.train_iters = opts_.train_iters;
  m.consumed_samples = consumed_samples_;
  m.global_batch_size = opts_.global_batch_size;
  m.loss_tokens = static_cast<int64_t>(loss_tokens);
  m.tokens = tokens;
  m.lm_loss = lm_loss;
  // Megatron logs the lr read after the scheduler stepped.
  m.learning_rate = scheduler_.lr_at(successful_steps_);
  m.grad_norm = grad_norm;
  m.has_grad_norm = !(scaler_ && skip);
  m.loss_scale = scaler_ ? scaler_->scale() : 1.0;
  m.skipped = skip;
  m.skipped_iterations = skipped_total_;
  m.nan_iterations = nan_total_;
  m.model_flops = model::train_flops(model_.config(), tokens, micro.empty() ? 0 : micro[0].T);
  m.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

double Trainer::evaluate(const std::vector<data::Batch>& batches) {
  double loss_sum = 0, tokens = 0;
  for (const data::Batch& b : batches) {
    model_.forward(token_batch(b), 0, /*training=*/false);
    loss_sum += weighted_loss(model_.losses(), b.loss_weights);
    tokens += weight_sum(b);
  }
  return tokens > 0 ? loss_sum / tokens : 0.0;
}

}  // namespace mtrain::train
