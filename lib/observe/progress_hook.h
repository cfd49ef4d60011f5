// ProgressHook: the training progress line (common/progress.h) on the rank
// that prints Megatron's log lines (the last rank): iteration / train_iters,
// elapsed, ETA from tqdm's smoothed rate, and the current step's loss and
// tokens/s as postfix. Its states go to a sink (stdout records for the
// terminal's owner); a null sink: no progress line.
#pragma once

#include <memory>

#include "common/progress.h"
#include "observe/hooks.h"

namespace mtrain::observe {

class ProgressHook : public TrainHook {
 public:
  explicit ProgressHook(ProgressSink* sink, ProgressClock clock = progress_steady_seconds)
      : sink_(sink), clock_(std::move(clock)) {}
  void on_train_begin(const TrainInfo& info) override;
  void on_step_end(const StepMetrics& m) override;
  void on_train_end(const TrainInfo& info) override;

 private:
  ProgressSink* sink_;
  ProgressClock clock_;
  std::unique_ptr<ProgressBar> bar_;
};

// "loss=2.31, tokens/s=5.10k" for one step (no loss on a skipped step).
std::string training_postfix(const StepMetrics& m);

}  // namespace mtrain::observe
