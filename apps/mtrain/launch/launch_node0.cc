// Node 0 of a multi-node launch: ompi-server, the URI handout on
// MASTER_ADDR:MASTER_PORT, this node's mpirun, and the liveness links to the
// other nodes' launchers (rendezvous_protocol.h).
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "common/errors.h"
#include "mtrain/launch/launch_multinode.h"
#include "mtrain/launch/launch_net.h"
#include "mtrain/launch/launch_run.h"
#include "mtrain/launch/launch_supervisor.h"
#include "mtrain/launch/rendezvous_protocol.h"

namespace mtrain::launch {

namespace {

constexpr int kHelloTimeoutMs = 10 * 1000;  // a connection must say who it is within this
constexpr int kPeerDoneWaitMs = 15 * 1000;  // after our mpirun ends, how long the others may take

struct Link {
  int fd = -1;
  LineReader reader;
  int node = -1;  // -1 until its hello was accepted
  long long opened_ms = 0;
  std::optional<int> done;  // the peer's DONE code
};

std::string make_job_id(int port) {
  std::random_device rd;
  return fmt::format("mtrain{}x{:08x}", port, rd());
}

// Every node that has not said hello yet, as "1, 3".
std::string missing_nodes(int nnodes, const std::set<int>& joined) {
  std::string s;
  for (int k = 1; k < nnodes; ++k) {
    if (joined.count(k)) continue;
    if (!s.empty()) s += ", ";
    s += std::to_string(k);
  }
  return s;
}

class Node0 {
 public:
  Node0(MpirunPlan plan, const Env& env) : plan_(std::move(plan)), env_(env), sup_(signals_, launcher_name(0), true) {}
  int run();

 private:
  void warn_unreachable_master() const;
  void on_listener();
  void on_link(Link& link);
  void on_hello(Link& link, const std::string& line);
  void check_deadline();
  void finish_links(int rc);

  MpirunPlan plan_;
  const Env& env_;
  SignalChannel signals_;
  MpirunSupervisor sup_;
  int listen_fd_ = -1;
  std::vector<Link> links_;
  std::set<int> joined_;
};

void Node0::warn_unreachable_master() const {
  const std::string& addr = plan_.request.master_addr;
  const std::string ip = resolve_ipv4(addr);
  if (ip.rfind("127.", 0) == 0 && addr.rfind("127.", 0) != 0 && addr != "localhost") {
    fmt::print(stderr,
               "mtrain: warning: MASTER_ADDR={} resolves to {} on node 0; other machines cannot reach a "
               "loopback address (use node 0's network address)\n",
               addr, ip);
  }
}

int Node0::run() {
  const LaunchRequest& r = plan_.request;
  warn_unreachable_master();
  listen_fd_ = tcp_listen(r.master_addr, r.master_port);  // before ompi-server: a busy port fails fast
  OmpiServer server(plan_, env_, signals_);
  plan_.server_uri = server.uri();
  plan_.rdzv_id = make_job_id(r.master_port);
  sup_.start(build_mpirun_command(plan_, env_));
  while (sup_.running()) {
    std::vector<pollfd> fds = {{signals_.fd(), POLLIN, 0}, {listen_fd_, POLLIN, 0}, {server.stderr_fd(), POLLIN, 0}};
    for (const auto& l : links_) fds.push_back({l.fd, POLLIN, 0});
    poll(fds.data(), fds.size(), 200);
    sup_.handle_signals();
    if (fds[1].revents) on_listener();
    if (fds[2].revents) server.forward_stderr();
    for (size_t i = 0; i < links_.size(); ++i) {
      if (fds[3 + i].revents || links_[i].node < 0) on_link(links_[i]);
    }
    std::erase_if(links_, [](const Link& l) { return l.fd < 0; });
    if (server.exited() && !sup_.stopped()) {
      sup_.stop(8, fmt::format("ompi-server ended ({})", describe_exit(server.exit_code())));
    }
    check_deadline();
    sup_.tick();
  }
  const int rc = sup_.exit_code();
  report_mpirun_exit(sup_);
  if (rc != 0 && static_cast<int>(joined_.size()) < r.nnodes - 1) {
    fmt::print(stderr, "{}: rendezvous incomplete: node(s) {} of {} never connected to {} within {:g} s\n",
               launcher_name(0), missing_nodes(r.nnodes, joined_), r.nnodes, rdzv_endpoint(r), r.rdzv_timeout_s);
  }
  finish_links(rc);
  if (listen_fd_ >= 0) close(listen_fd_);
  server.stop();  // last: the other nodes' ranks needed it until they finished
  unlink(plan_.joined_file.c_str());
  return rc;
}

void Node0::on_listener() {
  for (int fd; (fd = tcp_accept(listen_fd_)) >= 0;) {
    tcp_keepalive(fd);
    Link l;
    l.fd = fd;
    l.opened_ms = now_ms();
    links_.push_back(std::move(l));
  }
}

void Node0::on_hello(Link& link, const std::string& line) {
  const LaunchRequest& r = plan_.request;
  const auto hello = parse_hello(line);
  if (!hello) {  // not one of ours (a port scanner, a health check): drop it quietly
    close(link.fd);
    link.fd = -1;
    return;
  }
  const std::string reason = check_hello(*hello, r.nnodes, r.nproc_per_node, joined_);
  if (!reason.empty()) {
    send_text(link.fd, format_err(reason));
    close(link.fd);
    link.fd = -1;
    sup_.stop(8, reason);
    return;
  }
  send_text(link.fd, format_ok(plan_.rdzv_id, plan_.server_uri));
  link.node = hello->node;
  joined_.insert(hello->node);
  if (static_cast<int>(joined_.size()) == r.nnodes - 1 && listen_fd_ >= 0) {
    close(listen_fd_);  // every node is in: MASTER_PORT closes
    listen_fd_ = -1;
  }
}

void Node0::on_link(Link& link) {
  std::string line;
  for (;;) {
    const auto status = link.reader.next(link.fd, line);
    if (status == LineReader::Status::kWouldBlock) {
      if (link.node < 0 && now_ms() - link.opened_ms > kHelloTimeoutMs) {
        close(link.fd);
        link.fd = -1;
      }
      return;
    }
    if (status == LineReader::Status::kClosed) {
      if (link.node > 0 && !link.done && !sup_.stopped()) {
        sup_.stop(8, fmt::format("lost the link to node {}'s launcher (node down or killed)", link.node));
      }
      close(link.fd);
      link.fd = -1;
      return;
    }
    if (link.node < 0) {
      on_hello(link, line);
      if (link.fd < 0) return;
    } else if (auto code = parse_done(line)) {
      link.done = code;
      if (*code != 0 && !sup_.stopped()) {
        sup_.stop(8, fmt::format("node {}'s mpirun failed with {}", link.node, describe_exit(*code)),
                  kPeerFailureGraceMs, *code);
      }
    }
  }
}

void Node0::check_deadline() {
  if (sup_.stopped() || !rendezvous_overdue(plan_)) return;
  const LaunchRequest& r = plan_.request;
  const std::string missing = missing_nodes(r.nnodes, joined_);
  // The summary after mpirun ends names the missing nodes.
  sup_.stop(8, missing.empty() ? fmt::format("rendezvous incomplete after {:g} s: every node connected but the ranks "
                                             "did not form one world",
                                             r.rdzv_timeout_s)
                               : fmt::format("rendezvous incomplete after {:g} s", r.rdzv_timeout_s));
}

// Tells every node how node 0 ended and, when it ended well, waits for theirs
// (their ranks may still be finishing and ompi-server must outlive them).
void Node0::finish_links(int rc) {
  for (auto& l : links_) {
    if (l.node > 0) send_text(l.fd, format_done(rc));
  }
  const long long end = now_ms() + (rc == 0 ? kPeerDoneWaitMs : 0);
  auto waiting = [&] {
    for (const auto& l : links_) {
      if (l.fd >= 0 && l.node > 0 && !l.done) return true;
    }
    return false;
  };
  while (waiting() && now_ms() < end) {
    std::vector<pollfd> fds;
    for (const auto& l : links_) fds.push_back({l.fd, POLLIN, 0});
    poll(fds.data(), fds.size(), 200);
    for (auto& l : links_) {
      std::string line;
      if (l.fd < 0) continue;
      auto status = l.reader.next(l.fd, line);
      if (status == LineReader::Status::kLine) {
        if (auto code = parse_done(line)) l.done = code;
      } else if (status == LineReader::Status::kClosed) {
        close(l.fd);
        l.fd = -1;
      }
    }
  }
  for (auto& l : links_) {
    if (l.done && *l.done != 0) {
      fmt::print(stderr, "{}: node {}'s mpirun failed with {}\n", launcher_name(0), l.node, describe_exit(*l.done));
    }
    if (l.fd >= 0) close(l.fd);
    l.fd = -1;
  }
}

}  // namespace

int run_node0(MpirunPlan plan, const Env& env) {
  prepare_multinode_plan(plan, env);
  Node0 node(std::move(plan), env);
  return node.run();
}

}  // namespace mtrain::launch
