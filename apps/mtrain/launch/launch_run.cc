#include "mtrain/launch/launch_run.h"

#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <climits>
#include <cstdio>

#include "common/errors.h"
#include "mtrain/launch/launch_process.h"
#include "mtrain/launch/launch_supervisor.h"

namespace mtrain::launch {

std::string self_executable() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw DistributedError("cannot resolve /proc/self/exe", "mtrain's launcher needs Linux /proc");
  return std::string(buf, static_cast<size_t>(n));
}

namespace {

int run_single_node(const MpirunPlan& plan, const Env& env) {
  SignalChannel signals;
  MpirunSupervisor sup(signals, "mtrain: launch");
  sup.start(build_mpirun_command(plan, env));
  while (sup.running()) {
    pollfd p{signals.fd(), POLLIN, 0};
    poll(&p, 1, 200);
    sup.handle_signals();
    sup.tick();
  }
  report_mpirun_exit(sup);
  return sup.exit_code();
}

}  // namespace

int run_launch(const LaunchRequest& request, const Env& env, const std::vector<std::string>& args) {
  for (const auto& w : request.warnings) fmt::print(stderr, "mtrain: warning: {}\n", w);
  MpirunPlan plan;
  plan.request = request;
  plan.host = probe_host();
  plan.exe = self_executable();
  plan.args = args;
  if (!request.multi_node()) return run_single_node(plan, env);
  return request.node_rank == 0 ? run_node0(std::move(plan), env) : run_node_k(std::move(plan), env);
}

}  // namespace mtrain::launch
