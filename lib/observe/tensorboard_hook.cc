#include "observe/tensorboard_hook.h"

#include <algorithm>
#include <cmath>

#include "observe/logger.h"
#include "tensorboard/event_writer.h"

namespace mtrain::observe {

// The file is created here, before training: a directory that cannot hold
// it stops the run before its first step. A new file on every start, so a
// resumed run's steps continue beside the old file's.
TensorBoardHook::TensorBoardHook(TensorBoardOptions opts, const device::Device& dev)
    : opts_(std::move(opts)),
      dev_(dev),
      writer_(std::make_unique<tensorboard::EventFileWriter>(opts_.dir, opts_.queue_size)) {}

// The writer's destructor writes what is queued: reached on a normal end and
// when an exception unwinds run_training.
TensorBoardHook::~TensorBoardHook() = default;

std::string TensorBoardHook::path() const { return writer_->path(); }

void TensorBoardHook::add(const std::string& tag, double value, int64_t step) {
  writer_->add_scalar(tag, value, step, tensorboard::wall_time_now());
}

void TensorBoardHook::add_with_samples(const std::string& tag, double value, int64_t step, int64_t samples) {
  add(tag, value, step);
  add(tag + " vs samples", value, samples);
}

// "optimizer states" -> "npu-memory/optimizer-states-bytes".
static std::string memory_tag(device::MemCategory c) {
  std::string name = device::mem_category_name(c);
  std::replace(name.begin(), name.end(), ' ', '-');
  return "npu-memory/" + name + "-bytes";
}

void TensorBoardHook::write_iteration(const StepMetrics& m) {
  const int64_t it = m.iteration, samples = m.consumed_samples;
  add_with_samples("learning-rate", m.learning_rate, it, samples);
  add_with_samples("batch-size", static_cast<double>(m.global_batch_size), it, samples);
  add_with_samples("lm loss", m.lm_loss, it, samples);
  if (opts_.loss_scale) add_with_samples("loss-scale", m.loss_scale, it, samples);
  if (opts_.world_size) add_with_samples("world-size", opts_.world_size_value, it, samples);
  if (m.has_grad_norm) add_with_samples("grad-norm", m.grad_norm, it, samples);
  if (m.has_num_zeros) add_with_samples("num-zeros", static_cast<double>(m.num_zeros), it, samples);
  if (m.has_params_norm) add_with_samples("params-norm", m.params_norm, it, samples);
  if (!opts_.memory) return;
  const device::MemoryStats& st = dev_.stats();
  add("mem-reserved-bytes", static_cast<double>(st.reserved), it);
  add("mem-allocated-bytes", static_cast<double>(st.allocated), it);
  add("mem-max-allocated-bytes", static_cast<double>(st.max_allocated), it);
  for (int c = 0; c < static_cast<int>(device::MemCategory::kCount); ++c)
    add(memory_tag(static_cast<device::MemCategory>(c)), static_cast<double>(st.by_category[c]), it);
}

void TensorBoardHook::write_timers(const StepMetrics& m) {
  const double seconds = interval_ms_ / 1000.0 / static_cast<double>(std::max<int64_t>(1, interval_steps_));
  add("iteration-time", seconds, m.iteration);
  if (!opts_.log_throughput) return;
  add("throughput", tflops_per_gpu(opts_.flops_per_iteration, seconds, opts_.world_size_value), m.iteration);
  if (opts_.simulated_step_seconds) add("simulated-iteration-time", opts_.simulated_step_seconds(), m.iteration);
}

void TensorBoardHook::on_step_end(const StepMetrics& m) {
  consumed_samples_ = m.consumed_samples;
  interval_ms_ += m.elapsed_ms;
  ++interval_steps_;
  if (m.iteration % opts_.interval == 0) write_iteration(m);
  // The log line's iterations (observe/logger.h): timers, then the queue goes to the file.
  if (m.iteration % opts_.log_interval != 0 && m.iteration != m.train_iters) return;
  if (opts_.timers) write_timers(m);
  interval_ms_ = 0;
  interval_steps_ = 0;
  writer_->flush();
}

void TensorBoardHook::on_eval_end(const EvalMetrics& m) {
  add_with_samples("lm loss validation", m.lm_loss, m.iteration, consumed_samples_);
  if (opts_.validation_ppl)
    add_with_samples("lm loss validation ppl", std::exp(std::min(20.0, m.lm_loss)), m.iteration, consumed_samples_);
  writer_->flush();
}

void TensorBoardHook::on_train_end(const TrainInfo&) { writer_->flush(); }

}  // namespace mtrain::observe
