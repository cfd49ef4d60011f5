#include "train/watchdog.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "common/errors.h"

namespace mtrain::train {

namespace {

using Clock = std::chrono::steady_clock;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// How often the thread looks: often enough to fire soon after the timeout,
// rarely enough to cost nothing (at most 4 wake-ups a second).
std::chrono::nanoseconds poll_interval(double timeout_seconds) {
  const double s = std::clamp(timeout_seconds / 8, 1e-3, 0.25);
  return std::chrono::nanoseconds(static_cast<int64_t>(s * 1e9));
}

}  // namespace

Watchdog::Watchdog(double timeout_seconds, OnTimeout on_timeout, std::string who)
    : timeout_seconds_(timeout_seconds), on_timeout_(std::move(on_timeout)), who_(std::move(who)) {
  beat("start");
  thread_ = std::thread([this] { watch(); });
}

Watchdog::~Watchdog() { stop(); }

void Watchdog::beat(std::string_view what) {
  const size_t n = std::min(what.size(), kMaxLabel);
  {
    std::lock_guard<std::mutex> lock(label_mutex_);
    std::copy_n(what.data(), n, label_.data());
    label_size_ = n;
  }
  last_beat_ns_.store(now_ns(), std::memory_order_release);
}

void Watchdog::stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    stop_requested_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::begin_phase(std::string name, double timeout_seconds, OnTimeout on_timeout) {
  beat(name);  // first: the phase's limit counts from its start
  std::lock_guard<std::mutex> lock(phase_mutex_);
  phase_ = std::move(name);
  phase_timeout_seconds_ = timeout_seconds;
  phase_on_timeout_ = std::move(on_timeout);
}

void Watchdog::end_phase() {
  std::string done;
  {
    std::lock_guard<std::mutex> lock(phase_mutex_);
    done = std::move(phase_);
    phase_.clear();
    phase_on_timeout_ = nullptr;
  }
  if (!done.empty()) beat(done + " done");  // the normal limit counts from here
}

std::string Watchdog::report(double idle_seconds, const std::string& phase) const {
  std::string last;
  {
    std::lock_guard<std::mutex> lock(label_mutex_);
    last.assign(label_.data(), label_size_);
  }
  return fmt::format("{}{}no progress for {:.1f} s{}{} (last: {})", who_, who_.empty() ? "" : ": ", idle_seconds,
                     phase.empty() ? "" : " during ", phase, last);
}

void Watchdog::watch() {
  std::unique_lock<std::mutex> lock(stop_mutex_);
  auto interval = poll_interval(timeout_seconds_);
  while (!stop_cv_.wait_for(lock, interval, [this] { return stop_requested_; })) {
    std::string phase;
    double limit = timeout_seconds_;
    OnTimeout handler = on_timeout_;
    {
      std::lock_guard<std::mutex> p(phase_mutex_);
      if (!phase_.empty()) {
        phase = phase_;
        limit = phase_timeout_seconds_;
        handler = phase_on_timeout_;
      }
    }
    interval = poll_interval(std::min(limit, timeout_seconds_));
    const double idle = static_cast<double>(now_ns() - last_beat_ns_.load(std::memory_order_acquire)) * 1e-9;
    if (idle < limit) continue;
    fired_.store(true);
    const std::string text = report(idle, phase);
    lock.unlock();  // stop() may run while on_timeout does
    if (handler) handler(text);
    return;
  }
}

// --- WatchdogHook ------------------------------------------------------------

void WatchdogHook::on_train_begin(const observe::TrainInfo& info) {
  iteration_ = info.start_iteration;
  watchdog_->beat("training begins");
}

void WatchdogHook::on_step_begin(int64_t iteration) {
  iteration_ = iteration;
  char buf[64];
  const auto r = fmt::format_to_n(buf, sizeof buf, "began iteration {}", iteration);
  watchdog_->beat(std::string_view(buf, std::min(r.size, sizeof buf)));
}

void WatchdogHook::on_step_end(const observe::StepMetrics& m) {
  char buf[64];
  const auto r = fmt::format_to_n(buf, sizeof buf, "finished iteration {}", m.iteration);
  watchdog_->beat(std::string_view(buf, std::min(r.size, sizeof buf)));
}

void WatchdogHook::on_eval_end(const observe::EvalMetrics& m) {
  char buf[64];
  const auto r = fmt::format_to_n(buf, sizeof buf, "evaluation at iteration {}", m.iteration);
  watchdog_->beat(std::string_view(buf, std::min(r.size, sizeof buf)));
}

void WatchdogHook::on_comm(const parallel::CommEvent& e) {
  char buf[Watchdog::kMaxLabel];
  const auto r = fmt::format_to_n(buf, sizeof buf, "{} on group {}, iteration {}", parallel::comm_op_name(e.op),
                                  e.group, iteration_);
  watchdog_->beat(std::string_view(buf, std::min(r.size, sizeof buf)));
}

void WatchdogHook::on_train_end(const observe::TrainInfo&) { watchdog_->beat("training ends"); }

// --- the rank's watchdog ----------------------------------------------------------

void end_process_on_timeout(const Error& e) {
  std::fflush(stdout);
  std::fprintf(stderr, "%s\n", format_error(e).c_str());
  std::fflush(stderr);
  std::_Exit(static_cast<int>(e.code()));
}

std::shared_ptr<Watchdog> start_rank_watchdog(double timeout_seconds, int rank) {
  auto on_timeout = [rank](const std::string& report) {
    const DistributedError e(
        report + "; ending this rank",
        fmt::format("a peer rank is stuck or dead (or rank {} itself is); raise --distributed_timeout_minutes if a "
                    "step legitimately takes longer",
                    rank));
    end_process_on_timeout(e);
  };
  return std::make_shared<Watchdog>(timeout_seconds, std::move(on_timeout), fmt::format("rank {}", rank));
}

}  // namespace mtrain::train
