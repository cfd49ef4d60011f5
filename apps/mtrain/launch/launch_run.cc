#include "mtrain/launch/launch_run.h"

#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <optional>

#include "common/errors.h"
#include "mtrain/launch/launch_process.h"
#include "mtrain/launch/launch_relay.h"
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
  std::optional<OutputRelay> relay;
  if (plan.progress_records) relay.emplace();
  sup.start(build_mpirun_command(plan, env), relay ? relay->spawn_options() : SpawnOptions{});
  if (relay) relay->close_write_ends();
  supervise(sup, signals, relay ? &*relay : nullptr);
  report_mpirun_exit(sup);
  return sup.exit_code();
}

}  // namespace

int run_launch(const LaunchRequest& request, const Env& env, const std::vector<std::string>& args, bool progress) {
  for (const auto& w : request.warnings) fmt::print(stderr, "mtrain: warning: {}\n", w);
  MpirunPlan plan;
  plan.request = request;
  plan.host = probe_host();
  plan.exe = self_executable();
  plan.args = args;
  // Several nodes: each node's mpirun writes to its own terminal and the
  // progress line stays off (it would need the last rank's node to relay).
  plan.progress_records = progress && !request.multi_node() && stdout_wants_progress_relay(env);
  if (!request.multi_node()) return run_single_node(plan, env);
  return request.node_rank == 0 ? run_node0(std::move(plan), env) : run_node_k(std::move(plan), env);
}

}  // namespace mtrain::launch
