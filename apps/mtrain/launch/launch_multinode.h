// Pieces shared by the two halves of a multi-node launch (launch_node0.cc,
// launch_nodek.cc): the rendezvous deadline, the "world joined" marker the
// ranks leave, and the node-0-only ompi-server process.
#pragma once

#include <optional>
#include <string>

#include "mtrain/launch/launch_command.h"
#include "mtrain/launch/launch_process.h"

namespace mtrain::launch {

// The grace after the deadline before the launcher stops ranks itself (the
// ranks' watchdog fires at the deadline and usually reports first).
inline constexpr double kDeadlineGraceSeconds = 3.0;
// When another node reports failure, this node's mpirun may end by itself first
// (mpirun's own teardown takes about 2 s; a SIGTERM in the middle of it can crash it).
inline constexpr int kPeerFailureGraceMs = 3000;

std::string launcher_name(int node);                      // "mtrain: launch[node N]"
std::string rdzv_endpoint(const LaunchRequest& request);  // "ADDR:PORT"

// Chooses the interface, sets the deadline and the joined-marker path, prints what it chose.
void prepare_multinode_plan(MpirunPlan& plan, const Env& env);

// True once the deadline (+ grace) has passed and the local ranks have not reported the world complete.
bool rendezvous_overdue(const MpirunPlan& plan);
bool world_joined(const MpirunPlan& plan);

// One fresh ompi-server for the job (node 0). Its URI is read from its stderr
// (`-r +`); later stderr lines are forwarded with a prefix.
class OmpiServer {
 public:
  OmpiServer(const MpirunPlan& plan, const Env& env, SignalChannel& signals);
  ~OmpiServer();
  OmpiServer(const OmpiServer&) = delete;
  OmpiServer& operator=(const OmpiServer&) = delete;

  const std::string& uri() const { return uri_; }
  int stderr_fd() const { return stderr_fd_; }
  void forward_stderr();  // call when stderr_fd() is readable
  bool exited() { return child_ && child_->reap(); }
  int exit_code() const { return child_ ? child_->exit_code() : -1; }
  void stop();  // SIGTERM, up to 5 s, then SIGKILL

 private:
  std::optional<Child> child_;
  int stderr_fd_ = -1;
  std::string pending_;
  std::string uri_;
};

}  // namespace mtrain::launch
