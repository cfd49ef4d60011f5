// Watches this node's mpirun for the launcher: starts it (printing the exact
// command, as Megatron-SWIFT prints ``run sh: `torchrun ...` ``), forwards
// SIGINT/SIGTERM/SIGHUP that were sent to the launcher alone (a Ctrl-C already
// reached mpirun through the terminal's process group), and stops it when the
// launcher decides the job has failed (SIGTERM, then SIGKILL after a grace).
#pragma once

#include <optional>
#include <string>

#include "mtrain/launch/launch_command.h"
#include "mtrain/launch/launch_process.h"

namespace mtrain::launch {

class MpirunSupervisor {
 public:
  MpirunSupervisor(SignalChannel& signals, std::string who, bool multi_node = false)
      : signals_(signals), who_(std::move(who)), multi_node_(multi_node) {}

  // `announce`: print the command first (`run sh: ...`), as for mpirun.
  void start(const Command& command, const SpawnOptions& options = {}, bool announce = true);
  bool running() { return mpirun_ && !mpirun_->reap(); }
  // Reads the signalfd: forwards the user's signals, notes SIGCHLD (reaped by running()).
  void handle_signals();
  // The launcher's decision to end the job; the exit code becomes `rc`. With
  // `grace_ms`, mpirun may first end by itself (another node failed: this one's
  // ranks are usually failing alike, and a SIGTERM during mpirun's own abort
  // can crash it); SIGTERM follows only if it is still running then. If it
  // ends by itself with `alike_code` (the failed node's code, non-zero), the
  // nodes failed alike and that code, not `rc`, is the exit code.
  void stop(int rc, const std::string& why, int grace_ms = 0, int alike_code = 0);
  // Sends the SIGTERM / SIGKILL that stop() or a forwarded signal scheduled.
  void tick();
  // mpirun's exit code, or the code given to stop() (see alike_code there).
  int exit_code() const;
  bool stopped() const { return forced_rc_.has_value(); }
  int interrupt_signal() const { return interrupt_signal_; }
  const std::string& who() const { return who_; }
  bool multi_node() const { return multi_node_; }

 private:
  SignalChannel& signals_;
  std::string who_;  // "mtrain: launch" or "mtrain: launch[node 1]"
  bool multi_node_;
  std::optional<Child> mpirun_;
  std::optional<int> forced_rc_;
  int alike_code_ = 0;
  bool terminated_ = false;  // stop() had to send SIGTERM
  long long term_at_ms_ = 0;
  bool announce_term_ = false;
  long long kill_at_ms_ = 0;
  int interrupt_signal_ = 0;
};

// Prints `run sh: `<command>`` on stdout (flushed).
void print_run_sh(const Command& command);

// After mpirun ended: explains a non-zero exit code on stderr.
void report_mpirun_exit(const MpirunSupervisor& supervisor);

}  // namespace mtrain::launch
