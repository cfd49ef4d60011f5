// Building the mpirun and ompi-server command lines a launch runs: pure
// functions of the request, the host and the environment (unit-tested in
// tests/launch/test_launch_command.cc); launch_run.h executes them.
//
// What is decided here (docs/LAUNCH.md has the user-facing version):
//   - root: `--allow-run-as-root` (mpirun), OMPI_ALLOW_RUN_AS_ROOT{,_CONFIRM}=1 (ompi-server);
//   - more local ranks than cores: `--oversubscribe --bind-to none`; otherwise
//     each rank gets an equal block of cores (`--map-by slot:PE=k --bind-to core`);
//   - one node: shared memory only (`--mca btl self,vader`) unless OMPI_MCA_btl is set;
//   - several nodes: OpenMPI's TCP traffic restricted to one interface
//     (MTRAIN_IFNAME, else the one that reaches MASTER_ADDR) unless the user
//     already set the OMPI_MCA_/PMIX_MCA_ interface variables;
//   - `-x` for every variable a rank needs, so the command also works with a hostfile.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "mtrain/launch/launch_env.h"

namespace mtrain::launch {

struct HostFacts {
  int cores = 1;  // physical cores this process may run on
  bool root = false;
};
HostFacts probe_host();

// A program to run: argv plus variables set on top of the inherited environment.
struct Command {
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<std::string> argv;
  // The exact command as a shell would take it: `K='v' ... prog arg ...`.
  std::string display() const;
};

// Quotes for a POSIX shell only when needed (`abc` stays, `a b` -> `'a b'`).
std::string shell_quote(const std::string& word);

struct MpirunPlan {
  LaunchRequest request;
  HostFacts host;
  std::string exe;                // mtrain itself (/proc/self/exe resolved)
  std::vector<std::string> args;  // mtrain's own arguments (argv[1..])
  bool progress_records = false;  // the launcher draws the ranks' progress line (launch_relay.h)
  // Multi-node only:
  std::string server_uri;       // ompi-server's URI, handed out by node 0
  std::string rdzv_id;          // per-job service-name prefix
  double deadline_epoch_s = 0;  // rendezvous deadline for the ranks' watchdog
  std::string joined_file;      // local rank 0 creates it when the world is complete
  std::string mpi_interface;    // "" = leave interface selection to OpenMPI / the user
};

Command build_mpirun_command(const MpirunPlan& plan, const Env& env);

// `ompi-server --no-daemonize -r +` (URI on stderr), with the same interface settings as mpirun,
// listening on `port` only (IPv4 and IPv6 pinned to the same number, so that
// no second, random IPv6 listener opens); port 0 = OpenMPI's choice.
Command build_ompi_server_command(const HostFacts& host, const std::string& mpi_interface, int port, const Env& env);

// The interface variables for `mpi_interface` that the user has not set already.
std::vector<std::pair<std::string, std::string>> interface_env(const std::string& mpi_interface, const Env& env);

// True if the user already chose OpenMPI's interfaces (OMPI_MCA_*_if_include / _if_exclude, PMIX_MCA_ptl_*_if_*).
bool user_chose_interfaces(const Env& env);

// The interface for a multi-node job: MTRAIN_IFNAME; else "" when the user set
// the OpenMPI variables; else "lo" for a loopback MASTER_ADDR; else
// detect(MASTER_ADDR) (launch_net.h: the interface whose route reaches it; "" if unknown).
std::string choose_mpi_interface(const LaunchRequest& request, const Env& env,
                                 const std::function<std::string(const std::string&)>& detect);

// Splits MTRAIN_MPIRUN_ARGS on whitespace (no quoting: these are plain mpirun options).
std::vector<std::string> split_words(const std::string& text);

}  // namespace mtrain::launch
