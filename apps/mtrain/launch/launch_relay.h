// The progress line on the user's terminal. mtrain's ranks write to mpirun's
// pipes, never to the terminal, so the process that owns the terminal (the
// launcher, or mtrain re-run under itself for a one-process job) reads its
// child's stdout and stderr through pipes and passes them on through a
// ProgressTerminal (common/progress_terminal.h): log lines unchanged, the
// ranks' progress records drawn as one line below them. The child learns
// that it may write records from MTRAIN_PROGRESS_RECORDS=1.
#pragma once

#include <poll.h>

#include <string>
#include <vector>

#include "common/progress_terminal.h"
#include "mtrain/launch/launch_command.h"
#include "mtrain/launch/launch_process.h"

namespace mtrain::launch {

// Whether this process should draw a progress line for its child: stdout is
// a terminal and no process above already does (MTRAIN_PROGRESS_RECORDS unset).
bool stdout_wants_progress_relay(const Env& env);

class OutputRelay {
 public:
  OutputRelay();  // the pipes; throws DistributedError when they cannot be made
  ~OutputRelay();
  OutputRelay(const OutputRelay&) = delete;
  OutputRelay& operator=(const OutputRelay&) = delete;

  // The child's stdout and stderr are the pipes' write ends; `command` gets
  // the variable that tells the child to write records.
  SpawnOptions spawn_options() const;
  static void mark(Command& command);
  // After the child is spawned: the launcher's copies of the write ends go,
  // so end of file comes when the child (and its ranks) are gone.
  void close_write_ends();

  // Appends the pipes still open to `fds`; handle() reads those that are ready.
  void add_poll_fds(std::vector<pollfd>& fds) const;
  void handle(const std::vector<pollfd>& fds);
  // Nothing came for a while: a partial line (a prompt) is shown.
  void idle() { terminal_.flush_partial(); }
  // The child has ended: reads what is left (at most `timeout_ms`), ends the line.
  void drain(int timeout_ms);

 private:
  bool read_from(int index);  // false at end of file

  int read_fd_[2] = {-1, -1};   // stdout, stderr of the child (read ends)
  int write_fd_[2] = {-1, -1};  // their write ends until the child has them
  ProgressTerminal terminal_;
};

class MpirunSupervisor;
// Polls the user's signals and the relay (may be null) until the supervised
// child has ended, then drains the relay.
void supervise(MpirunSupervisor& sup, SignalChannel& signals, OutputRelay* relay);

// Runs `command` with its output relayed, forwarding the user's signals like
// the launcher's mpirun supervision; returns the child's exit code (128+N on
// signal N). For a one-process job: mtrain runs itself again as the child.
int run_relayed_self(const std::vector<std::string>& args);

}  // namespace mtrain::launch
