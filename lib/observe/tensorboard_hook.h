// TensorBoardHook: a step hook that writes Megatron-LM's TensorBoard scalars
// (training_log and evaluate_and_print_results in training.py) to one event
// file (tensorboard/event_writer.h) in --tensorboard_dir. Installed on the
// last rank only, as Megatron's writer. Tags, and when each is written:
//   every --tensorboard_log_interval iterations, the iteration's values at
//   step = iteration, and "<tag> vs samples" at step = consumed samples:
//     learning-rate, batch-size, lm loss, loss-scale (default on),
//     world-size (--log_world_size_to_tensorboard), grad-norm (none on an fp16
//     overflow skip), num-zeros, params-norm (with their --log_* flags);
//     --log_memory_to_tensorboard: mem-reserved-bytes, mem-allocated-bytes,
//     mem-max-allocated-bytes and mtrain's npu-memory/<category>-bytes of the
//     simulated NPU (step = iteration only, as Megatron);
//   at each log line (--log_interval), --log_timers_to_tensorboard:
//     iteration-time (seconds, averaged over the interval), and with
//     --log_throughput throughput (TFLOP/s/GPU) and mtrain's
//     simulated-iteration-time (seconds on the simulated device);
//   after each evaluation: lm loss validation (+ vs samples), and with
//     --log_validation_ppl_to_tensorboard lm loss validation ppl (+ vs samples).
// The queue is written at every log line, after each evaluation, at the end
// and when the hook is destroyed (a run stopped by an error or a signal
// unwinds through it), so a crashed run's curves are readable.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "device/device.h"
#include "observe/hooks.h"

namespace mtrain::tensorboard {
class EventFileWriter;
}

namespace mtrain::observe {

struct TensorBoardOptions {
  std::string dir;
  int64_t interval = 1;      // --tensorboard_log_interval
  int64_t log_interval = 5;  // --log_interval: when timers are written and the queue flushed
  size_t queue_size = 1000;
  bool timers = false;
  bool memory = false;
  bool validation_ppl = false;
  bool world_size = false;
  bool loss_scale = true;
  int world_size_value = 1;
  // --log_throughput: Megatron's FLOPs per iteration and, when set, the
  // logged iteration's simulated device time (observe/logger.h).
  bool log_throughput = false;
  double flops_per_iteration = 0;
  std::function<double()> simulated_step_seconds;
};

class TensorBoardHook : public TrainHook {
 public:
  // Creates the event file; ConfigError (exit 3) naming the directory when it cannot.
  TensorBoardHook(TensorBoardOptions opts, const device::Device& dev);
  ~TensorBoardHook() override;
  void on_step_end(const StepMetrics& m) override;
  void on_eval_end(const EvalMetrics& m) override;
  void on_train_end(const TrainInfo& info) override;
  // The event file being written.
  std::string path() const;

 private:
  void add(const std::string& tag, double value, int64_t step);
  void add_with_samples(const std::string& tag, double value, int64_t step, int64_t samples);
  void write_iteration(const StepMetrics& m);
  void write_timers(const StepMetrics& m);

  TensorBoardOptions opts_;
  const device::Device& dev_;
  std::unique_ptr<tensorboard::EventFileWriter> writer_;
  double interval_ms_ = 0;  // step times since the last log line
  int64_t interval_steps_ = 0;
  int64_t consumed_samples_ = 0;  // after the last step: validation's "vs samples" step
};

}  // namespace mtrain::observe
