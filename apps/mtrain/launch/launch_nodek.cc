// Node k >= 1 of a multi-node launch: fetch ompi-server's URI from node 0 at
// MASTER_ADDR:MASTER_PORT (retrying until the rendezvous deadline), run this
// node's mpirun, and keep the link to node 0 as the job's liveness signal.
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/errors.h"
#include "mtrain/launch/launch_multinode.h"
#include "mtrain/launch/launch_net.h"
#include "mtrain/launch/launch_run.h"
#include "mtrain/launch/launch_supervisor.h"
#include "mtrain/launch/rendezvous_protocol.h"

namespace mtrain::launch {

namespace {

constexpr int kRetryMs = 200;
constexpr int kConnectTimeoutMs = 1000;
constexpr int kReplyTimeoutMs = 5000;

// Waits up to `ms` for the signalfd; true if the user asked us to stop.
bool interrupted_during(SignalChannel& signals, int ms) {
  pollfd p{signals.fd(), POLLIN, 0};
  poll(&p, 1, ms);
  for (const auto& s : signals.drain()) {
    if (s.signo != SIGCHLD) return true;
  }
  return false;
}

// One attempt: connect, say hello, read the reply line. nullopt = retry later.
std::optional<RdzvReply> try_rendezvous(const LaunchRequest& r, int& fd, LineReader& reader, long long end_ms) {
  fd = tcp_connect(r.master_addr, r.master_port, kConnectTimeoutMs);
  if (fd < 0) return std::nullopt;
  if (!send_text(fd, format_hello({r.node_rank, r.nnodes, r.nproc_per_node}))) {
    close(fd);
    fd = -1;
    return std::nullopt;
  }
  const long long reply_end = std::min(end_ms, now_ms() + kReplyTimeoutMs);
  std::string line;
  while (now_ms() < reply_end) {
    pollfd p{fd, POLLIN, 0};
    poll(&p, 1, 100);
    const auto status = reader.next(fd, line);
    if (status == LineReader::Status::kLine) {
      if (auto reply = parse_reply(line)) return reply;
      break;
    }
    if (status == LineReader::Status::kClosed) break;
  }
  close(fd);
  fd = -1;
  reader = LineReader();
  return std::nullopt;
}

// Fetches ompi-server's URI from node 0 into `plan`; 0, or the exit code to return.
int join_node0(MpirunPlan& plan, SignalChannel& signals, int& link, LineReader& reader) {
  const LaunchRequest& r = plan.request;
  const std::string who = launcher_name(r.node_rank);
  std::optional<RdzvReply> reply;
  const long long end_ms = now_ms() + static_cast<long long>(r.rdzv_timeout_s * 1000);
  while (!(reply = try_rendezvous(r, link, reader, end_ms))) {
    if (now_ms() >= end_ms) {
      fmt::print(stderr,
                 "{}: no rendezvous at {} within {:g} s (node 0 not up? wrong MASTER_ADDR/MASTER_PORT? "
                 "a firewall?)\n",
                 who, rdzv_endpoint(r), r.rdzv_timeout_s);
      return static_cast<int>(ExitCode::kDistributed);
    }
    if (interrupted_during(signals, kRetryMs)) return 130;
  }
  if (!reply->ok) {
    fmt::print(stderr, "{}: node 0 refused this node: {}\n", who, reply->error);
    close(link);
    link = -1;
    return static_cast<int>(ExitCode::kDistributed);
  }
  tcp_keepalive(link);
  plan.server_uri = reply->uri;
  plan.rdzv_id = reply->job_id;
  return 0;
}

// Reads node 0's messages; stops this node's ranks when node 0 failed or vanished.
void watch_node0(MpirunSupervisor& sup, int& link, LineReader& reader, bool& node0_done) {
  std::string line;
  LineReader::Status status = LineReader::Status::kWouldBlock;
  while (link >= 0 && (status = reader.next(link, line)) == LineReader::Status::kLine) {
    auto code = parse_done(line);
    if (!code) continue;
    node0_done = true;
    if (*code != 0) {
      sup.stop(8, fmt::format("node 0's mpirun failed with {}", describe_exit(*code)), kPeerFailureGraceMs, *code);
    }
  }
  if (link >= 0 && status == LineReader::Status::kClosed) {
    close(link);
    link = -1;
    if (!node0_done) sup.stop(8, "lost the link to node 0's launcher (node 0 down or killed)");
  }
}

}  // namespace

int run_node_k(MpirunPlan plan, const Env& env) {
  prepare_multinode_plan(plan, env);
  const LaunchRequest& r = plan.request;
  SignalChannel signals;
  int link = -1;
  LineReader reader;
  if (const int rc = join_node0(plan, signals, link, reader); rc != 0) return rc;
  MpirunSupervisor sup(signals, launcher_name(r.node_rank), true);
  sup.start(build_mpirun_command(plan, env));
  bool node0_done = false;
  while (sup.running()) {
    pollfd fds[2] = {{signals.fd(), POLLIN, 0}, {link, POLLIN, 0}};
    poll(fds, 2, 200);
    sup.handle_signals();
    watch_node0(sup, link, reader, node0_done);
    if (!sup.stopped() && rendezvous_overdue(plan)) {
      sup.stop(8, fmt::format("rendezvous incomplete after {:g} s: the world did not form (node 0 at {} or another "
                              "node missing?)",
                              r.rdzv_timeout_s, rdzv_endpoint(r)));
    }
    sup.tick();
  }
  const int rc = sup.exit_code();
  report_mpirun_exit(sup);
  if (link >= 0) {
    send_text(link, format_done(rc));
    close(link);
  }
  unlink(plan.joined_file.c_str());
  return rc;
}

}  // namespace mtrain::launch
