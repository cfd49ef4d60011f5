// Publishes this rank's simulated device accounting for `mtrain npu-smi info`
// (device/npu_status.h): at train start and at every log interval, so a
// reader sees the numbers of the last logged memory line; the file goes away
// with the hook (normal end, or an exception unwinding the run).
#pragma once

#include <cstdint>

#include "device/npu_status.h"
#include "observe/hooks.h"

namespace mtrain::observe {

class NpuStatusHook : public TrainHook {
 public:
  NpuStatusHook(const device::Device& dev, device::NpuProcessStatus identity, int64_t log_interval)
      : dev_(dev), publisher_(device::npu_status_dir(), std::move(identity)), log_interval_(log_interval) {}
  void on_train_begin(const TrainInfo&) override { publisher_.publish(dev_); }
  void on_step_end(const StepMetrics& m) override {
    if (log_interval_ > 0 && m.iteration % log_interval_ == 0) publisher_.publish(dev_);
  }

 private:
  const device::Device& dev_;
  device::NpuStatusPublisher publisher_;
  int64_t log_interval_;
};

}  // namespace mtrain::observe
