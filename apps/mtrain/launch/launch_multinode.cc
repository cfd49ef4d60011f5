#include "mtrain/launch/launch_multinode.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/errors.h"
#include "mtrain/launch/launch_net.h"
#include "mtrain/launch/launch_supervisor.h"

namespace mtrain::launch {

namespace {
constexpr int kServerStartTimeoutMs = 30 * 1000;
}  // namespace

std::string launcher_name(int node) { return fmt::format("mtrain: launch[node {}]", node); }

std::string rdzv_endpoint(const LaunchRequest& r) { return fmt::format("{}:{}", r.master_addr, r.master_port); }

void prepare_multinode_plan(MpirunPlan& plan, const Env& env) {
  const LaunchRequest& r = plan.request;
  plan.mpi_interface = choose_mpi_interface(r, env, interface_reaching);
  plan.deadline_epoch_s = now_epoch_s() + r.rdzv_timeout_s;
  const std::string tmp = env.get("TMPDIR").value_or("/tmp");
  plan.joined_file = fmt::format("{}/mtrain-rdzv-{}-node{}.joined", tmp.empty() ? "/tmp" : tmp, getpid(), r.node_rank);
  unlink(plan.joined_file.c_str());
  fmt::print(stderr,
             "{}: NNODES={} x NPROC_PER_NODE={}, rendezvous at {} (MTRAIN_RDZV_TIMEOUT={:g} s), OpenMPI "
             "interface: {}\n",
             launcher_name(r.node_rank), r.nnodes, r.nproc_per_node, rdzv_endpoint(r), r.rdzv_timeout_s,
             plan.mpi_interface.empty() ? "as configured by OMPI_MCA_*/PMIX_MCA_*" : plan.mpi_interface);
  std::fflush(stderr);
}

bool world_joined(const MpirunPlan& plan) {
  struct stat st;
  return stat(plan.joined_file.c_str(), &st) == 0;
}

bool rendezvous_overdue(const MpirunPlan& plan) {
  return now_epoch_s() > plan.deadline_epoch_s + kDeadlineGraceSeconds && !world_joined(plan);
}

OmpiServer::OmpiServer(const MpirunPlan& plan, const Env& env, SignalChannel& signals) {
  const int port = plan.request.ompi_server_port;
  const Command cmd = build_ompi_server_command(plan.host, plan.mpi_interface, port, env);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw DistributedError(fmt::format("pipe failed: {}", std::strerror(errno)));
  print_run_sh(cmd);
  SpawnOptions opt;
  opt.own_process_group = true;  // Ctrl-C goes to the launcher, which ends the server last
  opt.stdin_null = true;
  opt.stderr_to = fds[1];
  try {
    child_ = Child::spawn(cmd, opt);
  } catch (...) {
    close(fds[0]);
    close(fds[1]);
    throw;
  }
  close(fds[1]);
  stderr_fd_ = fds[0];
  fcntl(stderr_fd_, F_SETFL, fcntl(stderr_fd_, F_GETFL) | O_NONBLOCK);
  const long long end = now_ms() + kServerStartTimeoutMs;
  while (uri_.empty()) {
    if (now_ms() > end || stderr_fd_ < 0 || exited()) {
      stop();
      throw DistributedError(
          fmt::format("ompi-server did not report its URI ({})",
                      child_->running() ? "timeout" : describe_exit(child_->exit_code())),
          port > 0 ? fmt::format("its port {} (MASTER_PORT+1, or MTRAIN_OMPI_SERVER_PORT) may be in use; its "
                                 "messages are above",
                                 port)
                   : "its messages are above");
    }
    pollfd p[2] = {{stderr_fd_, POLLIN, 0}, {signals.fd(), POLLIN, 0}};
    poll(p, 2, 200);
    for (const auto& s : signals.drain()) {
      if (s.signo != SIGCHLD) {
        stop();
        throw DistributedError(fmt::format("{} while starting ompi-server", strsignal(s.signo)));
      }
    }
    if (p[0].revents) forward_stderr();
  }
}

OmpiServer::~OmpiServer() { stop(); }

void OmpiServer::forward_stderr() {
  char buf[1024];
  for (;;) {
    const ssize_t n = read(stderr_fd_, buf, sizeof(buf));
    if (n > 0) {
      pending_.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      close(stderr_fd_);
      stderr_fd_ = -1;
    }
    break;
  }
  size_t nl;
  while ((nl = pending_.find('\n')) != std::string::npos) {
    const std::string line = pending_.substr(0, nl);
    pending_.erase(0, nl + 1);
    if (uri_.empty() && line.find(";tcp") != std::string::npos) {
      uri_ = line;  // e.g. 882507776.0;tcp://127.0.0.1:52339
    } else if (!line.empty()) {
      fmt::print(stderr, "ompi-server: {}\n", line);
    }
  }
}

void OmpiServer::stop() {
  if (child_ && child_->running()) {
    child_->signal(SIGTERM);
    child_->wait_or_kill(5000);
  }
  if (stderr_fd_ >= 0) {
    close(stderr_fd_);
    stderr_fd_ = -1;
  }
}

}  // namespace mtrain::launch
