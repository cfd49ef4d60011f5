#include "observe/progress_hook.h"

#include <cmath>

namespace mtrain::observe {

std::string training_postfix(const StepMetrics& m) {
  std::string s;
  if (!m.skipped) s = "loss=" + progress_num(m.lm_loss);
  if (m.elapsed_ms > 0) {
    if (!s.empty()) s += ", ";
    s += "tokens/s=" + progress_sizeof(static_cast<double>(m.tokens) / (m.elapsed_ms / 1000.0));
  }
  return s;
}

void ProgressHook::on_train_begin(const TrainInfo& info) {
  if (!sink_ || info.start_iteration >= info.train_iters) return;
  bar_ = std::make_unique<ProgressBar>("Train", info.train_iters, sink_, info.start_iteration, clock_);
}

void ProgressHook::on_step_end(const StepMetrics& m) {
  if (bar_) bar_->update(m.iteration, training_postfix(m));
}

void ProgressHook::on_train_end(const TrainInfo&) {
  if (bar_) bar_->close();
  bar_.reset();
}

}  // namespace mtrain::observe
