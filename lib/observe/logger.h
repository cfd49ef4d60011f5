// MegatronLogger: a step hook that prints Megatron-LM's training log line
// every --log_interval iterations (averaging loss and step time over the
// interval, as training_log does), the one-time memory line of the simulated
// NPU, validation lines, and one JSON object per logged step to
// <output_dir>/logging.jsonl (ms-swift's keys plus Megatron's).
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "device/device.h"
#include "observe/hooks.h"

namespace mtrain::observe {

struct LoggerOptions {
  int64_t log_interval = 5;
  // --log_throughput: Megatron's throughput from its FLOPs per iteration
  // (model/flops.h, the whole global batch) over the elapsed time per
  // iteration and the world size; and, when simulated_step_seconds is set,
  // the logged iteration's time on this rank's simulated device (observe/
  // step_record.h RecordCost::busy_s) with the same FLOPs over it.
  bool log_throughput = false;
  double flops_per_iteration = 0;
  std::function<double()> simulated_step_seconds;
  int rank = 0;
  int world_size = 1;
  std::string jsonl_path;  // empty: no file
  // Megatron prints the iteration and validation lines on the last rank
  // (print_rank_last) and the memory line on every rank of data-parallel rank 0.
  bool print_log = true;
  bool print_memory = true;
};

// --log_throughput's figures of one logged interval.
struct LogThroughput {
  double tflops_per_gpu = 0;  // Megatron's: FLOPs / (elapsed time per iteration x 10^12 x world size)
  bool simulated = false;     // the two below are set
  double simulated_ms = 0;    // the logged iteration on this rank's simulated device
  double simulated_tflops_per_gpu = 0;
};

// Megatron's throughput: FLOPs / (seconds per iteration x 10^12 x world size).
double tflops_per_gpu(double flops_per_iteration, double seconds_per_iteration, int world_size);
// Interval averages of StepMetrics::aux_losses, in first-seen order.
using AuxLossAverages = std::vector<std::pair<std::string, double>>;

// " [YYYY-mm-dd HH:MM:SS] iteration ... |" for an interval summary;
// `throughput` null: without --log_throughput. `aux` follow the lm loss as
// Megatron prints its total_loss_dict (` load_balancing_loss: X |`), each
// only when > 0.
std::string format_log_line(const StepMetrics& last, double avg_loss, double avg_ms, int64_t skipped_in_interval,
                            int64_t nan_in_interval, const LogThroughput* throughput, const std::string& timestamp,
                            const AuxLossAverages& aux = {});
// prefix: "iteration 100" during training, "iteration 100 on validation set" after it.
std::string format_validation_line(const std::string& prefix, double loss);
std::string now_timestamp();

class MegatronLogger : public TrainHook {
 public:
  MegatronLogger(LoggerOptions opts, const device::Device& dev);
  ~MegatronLogger() override;
  void on_train_begin(const TrainInfo& info) override;
  void on_step_end(const StepMetrics& m) override;
  void on_eval_end(const EvalMetrics& m) override;
  void on_train_end(const TrainInfo& info) override;

 private:
  LogThroughput throughput(double avg_ms) const;
  // Adds step m to the interval's sums (loss, time, skips, router losses).
  void accumulate(const StepMetrics& m);
  // One line of logging.jsonl for the logged step m.
  void write_jsonl(const StepMetrics& m, double avg_loss, double avg_ms, const LogThroughput* shown);

  LoggerOptions opts_;
  const device::Device& dev_;
  std::FILE* jsonl_ = nullptr;
  double sum_loss_ = 0, sum_ms_ = 0;
  AuxLossAverages sum_aux_;  // summed over the interval (skipped iterations too, as Megatron's tracker)
  int64_t steps_ = 0, counted_ = 0, skipped_ = 0, nans_ = 0;
  bool memory_reported_ = false;
  double total_ms_ = 0;
  int64_t start_iteration_ = 0;
};

}  // namespace mtrain::observe
