#include "mtrain/launch/launch_process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/errors.h"

extern char** environ;

namespace mtrain::launch {

namespace {

sigset_t launcher_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&set, s);
  return set;
}

// envp = environ overridden by `command.env`; built before fork (no allocation in the child).
std::vector<std::string> child_environment(const Command& command) {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const auto& kv : command.env) overridden = overridden || kv.first == name;
    if (!overridden) out.push_back(entry);
  }
  for (const auto& [k, v] : command.env) out.push_back(k + "=" + v);
  return out;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// In the child between fork and exec: async-signal-safe calls only.
[[noreturn]] void exec_child(const std::vector<char*>& argv, const std::vector<char*>& envp, const SpawnOptions& opt,
                             pid_t parent, int report_fd) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) signal(s, SIG_DFL);
  if (opt.own_process_group) setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(127);  // the launcher died before prctl took effect
  if (opt.stdin_null) {
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
  }
  if (opt.stdout_to >= 0) dup2(opt.stdout_to, 1);
  if (opt.stderr_to >= 0) dup2(opt.stderr_to, 2);
  execvpe(argv[0], argv.data(), envp.data());
  const int err = errno;
  ssize_t ignored = write(report_fd, &err, sizeof(err));
  (void)ignored;
  _exit(127);
}

}  // namespace

SignalChannel::SignalChannel() {
  const sigset_t set = launcher_signals();
  sigprocmask(SIG_BLOCK, &set, nullptr);
  fd_ = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd_ < 0) throw DistributedError(fmt::format("signalfd failed: {}", std::strerror(errno)));
}

SignalChannel::~SignalChannel() {
  if (fd_ >= 0) close(fd_);
  const sigset_t set = launcher_signals();
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
}

std::vector<SignalChannel::Received> SignalChannel::drain() {
  std::vector<Received> out;
  signalfd_siginfo info;
  while (read(fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    out.push_back({static_cast<int>(info.ssi_signo), info.ssi_code == SI_KERNEL});
  }
  return out;
}

Child Child::spawn(const Command& command, const SpawnOptions& options) {
  std::vector<std::string> env_strings = child_environment(command);
  std::vector<std::string> argv_strings = command.argv;
  const std::vector<char*> envp = c_strings(env_strings);
  const std::vector<char*> argv = c_strings(argv_strings);
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) throw DistributedError(fmt::format("pipe failed: {}", std::strerror(errno)));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw DistributedError(fmt::format("fork failed: {}", std::strerror(errno)));
  if (pid == 0) {
    close(report[0]);
    exec_child(argv, envp, options, parent, report[1]);
  }
  close(report[1]);
  int err = 0;
  ssize_t n;
  do {
    n = read(report[0], &err, sizeof(err));
  } while (n < 0 && errno == EINTR);
  close(report[0]);
  Child c;
  c.pid_ = pid;
  c.own_group_ = options.own_process_group;
  c.running_ = true;
  if (n == static_cast<ssize_t>(sizeof(err))) {
    c.wait_or_kill(1000);
    throw DistributedError(fmt::format("cannot run {}: {}", command.argv[0], std::strerror(err)),
                           "OpenMPI's launcher is needed: apt-get install openmpi-bin (scripts/install_deps.sh)");
  }
  return c;
}

bool Child::reap() {
  if (!running_) return true;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    running_ = false;
    exit_code_ = exit_code_of_status(status);
  }
  return !running_;
}

int Child::wait_or_kill(int timeout_ms) {
  const long long end = now_ms() + timeout_ms;
  while (!reap() && now_ms() < end) usleep(20 * 1000);
  if (running_) {
    signal(SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    running_ = false;
    exit_code_ = exit_code_of_status(status);
  }
  return exit_code_;
}

void Child::signal(int signo) const {
  if (!running_) return;
  ::kill(own_group_ ? -pid_ : pid_, signo);
}

int exit_code_of_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describe_exit(int code) {
  if (code > 128 && code < 128 + 65)
    return fmt::format("exit code {} (signal {}: {})", code, code - 128, strsignal(code - 128));
  return fmt::format("exit code {}", code);
}

long long now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

double now_epoch_s() {
  using namespace std::chrono;
  return duration_cast<duration<double>>(system_clock::now().time_since_epoch()).count();
}

}  // namespace mtrain::launch
