// Trainer: the training loop of one rank. Each iteration takes this DP rank's
// micro-batches of one global batch, runs them through the pipeline schedule
// (lib/parallel/pipeline_schedule.h; a single stage is F0 B0 F1 B1 ...),
// reduces the gradients across ranks (GradSync), checks loss and gradients
// for NaN/Inf, unscales (fp16), clips, steps the optimizer with the scheduled
// learning rate and reports to the step hooks. Evaluation runs every
// --eval_interval iterations. Every decision (skip, stop) is made on values
// all ranks share, so ranks never diverge.
//
// The loss is Megatron-SWIFT's per-token loss: the sum of token losses over
// the whole global batch divided by its number of loss tokens, so the result
// does not depend on how the batch is cut into micro-batches.
#pragma once

#include <memory>
#include <vector>

#include "config/args.h"
#include "data/batch_source.h"
#include "data/loader.h"
#include "device/device.h"
#include "model/gpt.h"
#include "observe/hooks.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "parallel/parallel_state.h"
#include "parallel/pipeline_schedule.h"
#include "train/grad_sync.h"

namespace mtrain::train {

// The loop's own counters, saved in a checkpoint and restored on resume.
struct TrainerCounters {
  int64_t iteration = 0;
  int64_t successful_steps = 0;  // optimizer steps taken: the LR schedule's position
  int64_t consumed_samples = 0;
  int64_t skipped_iterations = 0;
  int64_t nan_iterations = 0;
  int64_t consecutive_skips = 0;
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
  bool distributed_optimizer = false;  // --use_distributed_optimizer (only matters with DP > 1)
  int64_t bucket_elems = 0;            // DP gradient bucket size; <= 0: Megatron's default
  bool overlap_grad_reduce = false;    // start each bucket's reduction during the last backward
  bool overlap_param_gather = false;   // distributed optimizer: the next forward waits for each chunk's buckets
  bool log_params_norm = false;        // observe::StepMetrics::params_norm after each step
  bool log_num_zeros_in_grad = false;  // observe::StepMetrics::num_zeros of each step's gradients
};

class Trainer {
 public:
  Trainer(TrainerOptions opts, model::GptModel& model, optim::Optimizer& optimizer, optim::LrScheduler& scheduler,
          optim::GradScaler* scaler, data::BatchSource& train_data, const std::vector<data::Batch>* val_batches,
          observe::HookList& hooks, parallel::ParallelState* parallel = nullptr);
  ~Trainer();

  // Runs iterations start+1 .. train_iters, then evaluates once more (as
  // Megatron does) if evaluation is on. Throws NonFiniteError on a NaN/Inf
  // loss or gradient norm unless skipping was requested.
  void train();
  // Mean per-token loss over the validation batches (no dropout, no grads);
  // `batches` are this DP rank's share. The same value on every rank.
  double evaluate(const std::vector<data::Batch>& batches);
  int64_t iteration() const { return iteration_; }
  int64_t consumed_samples() const { return consumed_samples_; }
  TrainerCounters counters() const;
  // Before train(): continue from a checkpoint's counters.
  void restore(const TrainerCounters& c);
  // This rank's groups and coordinates.
  parallel::ParallelState& parallel_state() { return *state_; }

 private:
  // One iteration: forward_backward, optimizer_step, then the metrics.
  observe::StepMetrics train_step();
  // What forward and backward of one global batch leave for the step.
  struct StepLoss {
    double loss_tokens = 0;  // of the whole global batch (all DP and CP ranks)
    int64_t tokens = 0;
    double lm_loss = 0;
    std::vector<std::pair<std::string, double>> aux_losses;
  };
  struct StepUpdate {
    bool skipped = false;  // fp16 overflow or (--on_nonfinite skip) a non-finite loss / grad norm
    double grad_norm = 0;
  };
  // The global batch through the schedule, its loss shared, the gradients
  // reduced over DP (and the MoE expert bias updated).
  StepLoss forward_backward(int64_t it);
  // Unscale and check, grad norm, then the update (clipped) or a skip;
  // m gets the gradient's zeros when they are logged.
  StepUpdate optimizer_step(int64_t it, double lm_loss, observe::StepMetrics& m);
  // A non-finite loss or grad norm: counts it; throws NonFiniteError unless
  // skipping was asked for; returns whether the step is skipped.
  bool on_nonfinite(int64_t it, double lm_loss, double grad_norm);
  // A skipped step: counts it; throws NonFiniteError past the consecutive-skip cap.
  void count_skip(int64_t it);
  void fill_step_metrics(observe::StepMetrics& m, int64_t it, StepLoss loss, const StepUpdate& u) const;
  // Runs the schedule over `micro`; returns this rank's weighted loss sum
  // (non-zero only on the last stage's TP rank 0).
  double run_schedule(const std::vector<data::Batch>& micro, int64_t it, double dloss_scale);
  double share_loss(double local);  // sum over the world of the last stage's contributions
  // Context parallelism: this CP rank's two chunks of every micro-batch
  // (Megatron's get_batch_on_this_cp_rank); the loss and its token count are
  // then sums over the CP ranks too.
  std::vector<data::Batch> cp_share(std::vector<data::Batch> micro) const;
  bool eval_enabled() const { return opts_.eval_interval > 0 && val_batches_ && !val_batches_->empty(); }

  TrainerOptions opts_;
  model::GptModel& model_;
  optim::Optimizer& optimizer_;
  optim::LrScheduler& scheduler_;
  optim::GradScaler* scaler_;  // null unless fp16
  data::BatchSource& train_data_;
  const std::vector<data::Batch>* val_batches_;
  observe::HookList& hooks_;
  int64_t iteration_ = 0;
  int64_t successful_steps_ = 0;
  int64_t consumed_samples_ = 0;
  int64_t skipped_total_ = 0;
  int64_t nan_total_ = 0;
  int64_t consecutive_skips_ = 0;
  std::vector<float> dloss_;
  std::unique_ptr<parallel::ParallelState> own_state_;  // one device: a world of one
  parallel::ParallelState* state_;
  std::unique_ptr<GradSync> grad_sync_;
  parallel::PipelineBuffers pipe_buffers_;  // PP > 1: the receive buffers, on the model's device
  observe::CommTotals step_comm_;           // this step's communication (observer)
  std::map<std::string, observe::CommTotals> step_comm_by_group_;
};

model::TokenBatch token_batch(const data::Batch& b);
// The optimizer's view of the model's flat parameter buffer (norms and
// biases without weight decay, as the ParamStore marks them).
std::vector<optim::ParamRange> optimizer_ranges(const model::ParamStore& ps);

}  // namespace mtrain::train
