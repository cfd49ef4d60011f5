// The simulated device's clock: its streams and when each is free. Work
// issued on a stream at time `issue` starts at max(issue, the stream's free
// time) and holds the stream for its duration, as a CUDA / ACL stream runs
// what the host queued in order. A stream can also wait for a time (an
// event another stream records), after which nothing on it starts earlier.
//
// One clock for every place that lays work on the simulated device: the
// step recorder's pricing of a micro-batch phase (observe/step_record.h:
// the compute stream, the communication stream beside it, the host that
// issues the kernels), the profiler's NPU timeline (observe/profiler_hook.h)
// and the dry run's pipeline schedule (plan/step_time.h: one compute stream
// per stage, the DP communication stream).
#pragma once

#include <algorithm>
#include <array>

namespace mtrain::device {

enum class Stream { kCompute = 0, kComm = 1 };

class DeviceClock {
 public:
  // Places `duration` on `s`, issued at `issue`; returns when it starts.
  double place(Stream s, double issue, double duration) {
    double& f = free_[index(s)];
    const double begin = std::max(issue, f);
    f = begin + duration;
    return begin;
  }
  // `s` waits until `t`: nothing on it starts earlier.
  void wait_until(Stream s, double t) { free_[index(s)] = std::max(free_[index(s)], t); }
  // When the work placed on `s` so far ends.
  double free_at(Stream s) const { return free_[index(s)]; }

 private:
  static int index(Stream s) { return static_cast<int>(s); }
  std::array<double, 2> free_{0.0, 0.0};
};

}  // namespace mtrain::device
