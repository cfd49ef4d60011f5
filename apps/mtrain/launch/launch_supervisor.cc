#include "mtrain/launch/launch_supervisor.h"

#include <fmt/format.h>
#include <signal.h>

#include <cstdio>

namespace mtrain::launch {

namespace {
constexpr int kStopGraceMs = 10 * 1000;       // after our SIGTERM, mpirun gets this long to end its ranks
constexpr int kInterruptGraceMs = 30 * 1000;  // after a forwarded user signal
}  // namespace

void print_run_sh(const Command& command) {
  fmt::print("run sh: `{}`\n", command.display());
  std::fflush(stdout);
}

void MpirunSupervisor::start(const Command& command, const SpawnOptions& options, bool announce) {
  if (announce) print_run_sh(command);
  mpirun_ = Child::spawn(command, options);
}

void MpirunSupervisor::handle_signals() {
  for (const auto& s : signals_.drain()) {
    if (s.signo == SIGCHLD) continue;  // reaped by running()
    interrupt_signal_ = s.signo;
    if (!mpirun_ || !mpirun_->running()) continue;
    if (!s.from_terminal) mpirun_->signal(s.signo);
    if (kill_at_ms_ == 0) kill_at_ms_ = now_ms() + kInterruptGraceMs;
  }
}

void MpirunSupervisor::stop(int rc, const std::string& why, int grace_ms, int alike_code) {
  if (forced_rc_) return;
  forced_rc_ = rc;
  alike_code_ = alike_code;
  fmt::print(stderr, "{}: {}{}\n", who_, why, grace_ms > 0 ? "" : "; stopping this node's ranks");
  std::fflush(stderr);
  term_at_ms_ = now_ms() + grace_ms;
  announce_term_ = grace_ms > 0;
  tick();
}

void MpirunSupervisor::tick() {
  if (!mpirun_ || !mpirun_->running()) return;
  if (term_at_ms_ != 0 && now_ms() >= term_at_ms_) {
    if (announce_term_) fmt::print(stderr, "{}: this node's ranks are still running; stopping them\n", who_);
    term_at_ms_ = 0;
    terminated_ = true;
    mpirun_->signal(SIGTERM);
    kill_at_ms_ = now_ms() + kStopGraceMs;
  }
  if (kill_at_ms_ != 0 && now_ms() > kill_at_ms_) {
    fmt::print(stderr, "{}: mpirun (pid {}) did not end after SIGTERM; killing it\n", who_, mpirun_->pid());
    mpirun_->signal(SIGKILL);
    kill_at_ms_ = 0;
  }
}

int MpirunSupervisor::exit_code() const {
  const int rc = mpirun_ ? mpirun_->exit_code() : 1;
  if (forced_rc_) return alike_code_ != 0 && !terminated_ && rc == alike_code_ ? rc : *forced_rc_;
  // Interrupted by the user: report it as the shell would for the launcher itself (130 for SIGINT).
  if (rc != 0 && interrupt_signal_ != 0) return 128 + interrupt_signal_;
  return rc;
}

void report_mpirun_exit(const MpirunSupervisor& sup) {
  const int rc = sup.exit_code();
  if (rc == 0 || sup.stopped()) return;
  if (sup.interrupt_signal() != 0) {
    fmt::print(stderr, "{}: stopped by SIG{}\n", sup.who(), sigabbrev_np(sup.interrupt_signal()));
    std::fflush(stderr);
    return;
  }
  std::string what = fmt::format("mpirun ended with exit code {}", rc);
  if (rc > 128 && rc < 128 + 65) {
    what += fmt::format(" (a rank was killed by signal {}: {})", rc - 128, strsignal(rc - 128));
  }
  fmt::print(stderr, "{}: {}; mpirun's report above names the rank{}\n", sup.who(), what,
             sup.multi_node() ? " (its rank numbers count this node's ranks: world rank = NODE_RANK x NPROC_PER_NODE "
                                "+ that number)"
                              : "");
  std::fflush(stderr);
}

}  // namespace mtrain::launch
