#include "mtrain/launch/launch_relay.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/errors.h"
#include "mtrain/launch/launch_run.h"
#include "mtrain/launch/launch_supervisor.h"

namespace mtrain::launch {

namespace {

// Writes all of `bytes` (the terminal may take them in parts).
void write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the terminal is gone: nothing left to show it to
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

int terminal_columns() {
  winsize w{};
  return ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 ? w.ws_col : 0;
}

}  // namespace

bool stdout_wants_progress_relay(const Env& env) { return isatty(STDOUT_FILENO) != 0 && !env.has(kProgressRecordsEnv); }

OutputRelay::OutputRelay() : terminal_(write_all, terminal_columns) {
  for (int i = 0; i < 2; ++i) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
      throw DistributedError(fmt::format("pipe failed: {}", std::strerror(errno)), "too many open files?");
    read_fd_[i] = fds[0];
    write_fd_[i] = fds[1];
  }
}

OutputRelay::~OutputRelay() {
  close_write_ends();
  for (int& fd : read_fd_)
    if (fd >= 0) close(fd);
}

SpawnOptions OutputRelay::spawn_options() const {
  SpawnOptions o;
  o.stdout_to = write_fd_[0];
  o.stderr_to = write_fd_[1];
  return o;
}

void OutputRelay::mark(Command& command) { command.env.emplace_back(kProgressRecordsEnv, "1"); }

void OutputRelay::close_write_ends() {
  for (int& fd : write_fd_) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

void OutputRelay::add_poll_fds(std::vector<pollfd>& fds) const {
  for (int fd : read_fd_)
    if (fd >= 0) fds.push_back({fd, POLLIN, 0});
}

bool OutputRelay::read_from(int index) {
  char buf[1 << 16];
  const ssize_t n = ::read(read_fd_[index], buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) {
    close(read_fd_[index]);
    read_fd_[index] = -1;
    return false;
  }
  terminal_.feed(index + 1, std::string_view(buf, static_cast<size_t>(n)));
  return true;
}

void OutputRelay::handle(const std::vector<pollfd>& fds) {
  for (const pollfd& p : fds) {
    if (!(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
    for (int i = 0; i < 2; ++i)
      if (read_fd_[i] == p.fd) read_from(i);
  }
}

void OutputRelay::drain(int timeout_ms) {
  const long long end = now_ms() + timeout_ms;
  for (;;) {
    std::vector<pollfd> fds;
    add_poll_fds(fds);
    if (fds.empty()) break;
    const long long left = end - now_ms();
    if (left <= 0 || poll(fds.data(), fds.size(), static_cast<int>(left)) <= 0) break;
    handle(fds);
  }
  terminal_.finish();
}

void supervise(MpirunSupervisor& sup, SignalChannel& signals, OutputRelay* relay) {
  while (sup.running()) {
    std::vector<pollfd> fds{{signals.fd(), POLLIN, 0}};
    if (relay) relay->add_poll_fds(fds);
    const int ready = poll(fds.data(), fds.size(), 200);
    if (relay && ready > 0) relay->handle(fds);
    if (relay && ready == 0) relay->idle();
    sup.handle_signals();
    sup.tick();
  }
  // What the child wrote last (an error message) is still in the pipes.
  if (relay) relay->drain(2000);
}

int run_relayed_self(const std::vector<std::string>& args) {
  SignalChannel signals;
  MpirunSupervisor sup(signals, "mtrain");
  Command command;
  command.argv.push_back(self_executable());
  command.argv.insert(command.argv.end(), args.begin(), args.end());
  OutputRelay::mark(command);
  OutputRelay relay;
  sup.start(command, relay.spawn_options(), /*announce=*/false);
  relay.close_write_ends();
  supervise(sup, signals, &relay);
  const int rc = sup.exit_code();
  // Its own errors the child printed; a signal that ended it, the shell would have said.
  if (sup.interrupt_signal() != 0 && rc != 0) {
    report_mpirun_exit(sup);
  } else if (rc > 128) {
    fmt::print(stderr, "mtrain: the run ended with {}\n", describe_exit(rc));
    std::fflush(stderr);
  }
  return rc;
}

}  // namespace mtrain::launch
