// Launcher-side process control. The launcher is single-threaded: it blocks
// SIGINT/SIGTERM/SIGHUP/SIGCHLD and reads them from a signalfd, so one poll()
// loop sees its children, its sockets and the user's signals together.
// Children are started with fork+exec: their own signal mask restored,
// PR_SET_PDEATHSIG so that a killed launcher never leaves an mpirun behind.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "mtrain/launch/launch_command.h"

namespace mtrain::launch {

class SignalChannel {
 public:
  SignalChannel();  // blocks the signals above in this process
  ~SignalChannel();
  SignalChannel(const SignalChannel&) = delete;
  SignalChannel& operator=(const SignalChannel&) = delete;

  int fd() const { return fd_; }
  struct Received {
    int signo;
    bool from_terminal;  // sent by the kernel to the whole foreground group (Ctrl-C): the child has it too
  };
  std::vector<Received> drain();

 private:
  int fd_ = -1;
};

struct SpawnOptions {
  bool own_process_group = false;  // keep terminal signals away (ompi-server: the launcher ends it)
  bool stdin_null = false;
  int stdout_to = -1;  // dup2 this fd onto the child's stdout (a pipe) when >= 0
  int stderr_to = -1;  // dup2 this fd onto the child's stderr (a pipe) when >= 0
};

class Child {
 public:
  // Throws DistributedError when the program cannot be executed (e.g. mpirun not installed).
  static Child spawn(const Command& command, const SpawnOptions& options = {});

  pid_t pid() const { return pid_; }
  bool running() const { return running_; }
  // waitpid(WNOHANG); true once the child has exited (then exit_code() is valid).
  bool reap();
  // Blocks up to `timeout_ms` (polling), then SIGKILLs; returns the exit code.
  int wait_or_kill(int timeout_ms);
  int exit_code() const { return exit_code_; }  // 128+N when killed by signal N, as a shell reports it
  void signal(int signo) const;

 private:
  pid_t pid_ = -1;
  bool own_group_ = false;
  bool running_ = false;
  int exit_code_ = -1;
};

// Exit code of a wait status, shell style.
int exit_code_of_status(int status);
// "exit code 8" / "exit code 137 (signal 9: Killed)".
std::string describe_exit(int code);
// Monotonic milliseconds and wall-clock seconds.
long long now_ms();
double now_epoch_s();

}  // namespace mtrain::launch
