// Trainer: the training loop of one rank. Each iteration takes one global
// batch (split into micro-batches: gradient accumulation), runs forward and
// backward, checks loss and gradients for NaN/Inf, unscales (fp16), clips,
// steps the optimizer with the scheduled learning rate and reports to the
// step hooks. Evaluation runs every --eval_interval iterations.
//
// The loss is Megatron-SWIFT's per-token loss: the sum of token losses over
// the whole global batch divided by its number of loss tokens, so the result
// does not depend on how the batch is cut into micro-batches.
#pragma once

#include <memory>
#include <vector>

#include "config/args.h"
#include "data/loader.h"
#include "device/device.h"
#include "model/gpt.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "train/hooks.h"

namespace mtrain::train {

// Yields the micro-batches of successive global batches (train) or the whole
// validation set.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual std::vector<data::Batch> next_global_batch() = 0;
  virtual int64_t global_batch_samples() const = 0;
};

struct TrainerOptions {
  int64_t train_iters = 0;
  int64_t global_batch_size = 1;
  int64_t eval_interval = 0;  // 0: never
  double clip_grad = 1.0;
  bool check_nonfinite = true;
  bool skip_nonfinite = false;  // --on_nonfinite skip
  int64_t max_consecutive_skips = 5;
  uint64_t seed = 42;
};

class Trainer {
 public:
  Trainer(TrainerOptions opts, model::GptModel& model, optim::Optimizer& optimizer, optim::LrScheduler& scheduler,
          optim::GradScaler* scaler, BatchSource& train_data, const std::vector<data::Batch>* val_batches,
          HookList& hooks);

  // Runs iterations start+1 .. train_iters, then evaluates once more (as
  // Megatron does) if evaluation is on. Throws NonFiniteError on a NaN/Inf
  // loss or gradient norm unless skipping was requested.
  void train();
  // Mean per-token loss over the validation batches (no dropout, no grads).
  double evaluate(const std::vector<data::Batch>& batches);
  int64_t iteration() const { return iteration_; }
  int64_t consumed_samples() const { return consumed_samples_; }

 private:
  StepMetrics train_step();
  bool eval_enabled() const { return opts_.eval_interval > 0 && val_batches_ && !val_batches_->empty(); }

  TrainerOptions opts_;
  model::GptModel& model_;
  optim::Optimizer& optimizer_;
  optim::LrScheduler& scheduler_;
  optim::GradScaler* scaler_;  // null unless fp16
  BatchSource& train_data_;
  const std::vector<data::Batch>* val_batches_;
  HookList& hooks_;
  int64_t iteration_ = 0;
  int64_t successful_steps_ = 0;
  int64_t consumed_samples_ = 0;
  int64_t skipped_total_ = 0;
  int64_t nan_total_ = 0;
  int64_t consecutive_skips_ = 0;
  std::vector<float> dloss_;
};

model::TokenBatch token_batch(const data::Batch& b);
// The optimizer's view of the model's flat parameter buffer (norms and
// biases without weight decay, as the ParamStore marks them).
std::vector<optim::ParamRange> optimizer_ranges(const model::ParamStore& ps);

}  // namespace mtrain::train
