// Watchdog: one thread per rank that notices when the rank stops making
// progress (Megatron's --distributed-timeout-minutes, reliability.md F6).
//
// The training loop reports progress with beat() -- at every step boundary
// and after every collective (WatchdogHook). When no beat arrives for
// `timeout_seconds`, the watchdog calls on_timeout once, on its own thread,
// with a report naming the last progress:
//   "rank 3: no progress for 30.0 s (last: all_reduce on group dp, iteration 12)"
// A rank blocked in a collective whose peer is stuck or dead -- or stuck
// itself -- thus ends instead of hanging the job forever. The watchdog makes
// no MPI calls (MPI runs THREAD_FUNNELED); start_rank_watchdog's on_timeout
// ends the process, and mpirun then takes the other ranks down.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "common/errors.h"
#include "observe/hooks.h"

namespace mtrain::train {

class Watchdog {
 public:
  using OnTimeout = std::function<void(const std::string& report)>;
  static constexpr size_t kMaxLabel = 128;  // longer beat labels are cut

  // Starts the thread; the construction counts as the first beat ("start").
  // `who` opens the report ("rank 3"); empty: the report starts with "no progress".
  Watchdog(double timeout_seconds, OnTimeout on_timeout, std::string who = "");
  ~Watchdog();  // stop()
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Records progress: a clock read, an uncontended lock and a copy of at most
  // kMaxLabel bytes; no allocation. Safe from any thread, also after stop().
  void beat(std::string_view what);

  // A phase with its own time limit and handler (a checkpoint save): until
  // end_phase(), the watchdog fires after `timeout_seconds` without a beat,
  // names the phase in the report and calls `on_timeout` instead of the
  // constructor's handler.
  void begin_phase(std::string name, double timeout_seconds, OnTimeout on_timeout);
  void end_phase();

  // Ends the thread promptly (within a wake-up, not a timeout); on_timeout is
  // never called afterwards. Waits for an on_timeout that is already running.
  void stop();

  bool fired() const { return fired_.load(); }
  double timeout_seconds() const { return timeout_seconds_; }

 private:
  void watch();
  std::string report(double idle_seconds, const std::string& phase) const;

  const double timeout_seconds_;
  const OnTimeout on_timeout_;
  const std::string who_;
  std::atomic<int64_t> last_beat_ns_{0};  // steady_clock, nanoseconds
  mutable std::mutex label_mutex_;
  std::array<char, kMaxLabel> label_{};
  size_t label_size_ = 0;
  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  bool stop_requested_ = false;
  std::atomic<bool> fired_{false};
  std::mutex phase_mutex_;
  std::string phase_;  // empty: none
  double phase_timeout_seconds_ = 0;
  OnTimeout phase_on_timeout_;
  std::thread thread_;  // last member: starts once everything above exists
};

// Beats from the training loop: step begin/end, evaluation and every
// completed collective or transfer ("all_reduce on group dp, iteration 12").
class WatchdogHook : public observe::TrainHook {
 public:
  explicit WatchdogHook(std::shared_ptr<Watchdog> watchdog) : watchdog_(std::move(watchdog)) {}
  void on_train_begin(const observe::TrainInfo& info) override;
  void on_step_begin(int64_t iteration) override;
  void on_step_end(const observe::StepMetrics& m) override;
  void on_eval_end(const observe::EvalMetrics& m) override;
  void on_comm(const parallel::CommEvent& e) override;
  void on_train_end(const observe::TrainInfo& info) override;

 private:
  std::shared_ptr<Watchdog> watchdog_;
  int64_t iteration_ = 0;  // the step in progress (or the last one finished)
};

// What a timeout handler does: prints `e` (format_error) to stderr and ends
// the process at once with e's exit code, without unwinding (the main thread
// is blocked and cannot be reached).
[[noreturn]] void end_process_on_timeout(const Error& e);

// The watchdog of one rank of a multi-rank run: on timeout it prints
//   mtrain: error: rank R: no progress for T s (last: ...)
//     hint: a peer rank is stuck or dead; raise --distributed_timeout_minutes ...
// to stderr and ends the process at once with exit code 8 (kDistributed).
std::shared_ptr<Watchdog> start_rank_watchdog(double timeout_seconds, int rank);

}  // namespace mtrain::train
