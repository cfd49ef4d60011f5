// The launcher: what `NPROC_PER_NODE=4 mtrain sft ...` and the torchrun-style
// multi-node variables do before any rank exists (docs/LAUNCH.md).
//   one node:    run `mpirun -np NPROC_PER_NODE <this binary> <args>` and propagate its exit code;
//   NNODES > 1:  node 0 starts ompi-server and serves its URI on MASTER_ADDR:MASTER_PORT,
//                the other nodes fetch it (retrying until MTRAIN_RDZV_TIMEOUT), every node
//                runs its own mpirun pointed at that server, and the ranks join one world
//                (rendezvous.h). Exit code 8 when the rendezvous does not complete in time.
#pragma once

#include <string>
#include <vector>

#include "mtrain/launch/launch_command.h"
#include "mtrain/launch/launch_env.h"

namespace mtrain::launch {

// Runs this node's part of the launch; returns the exit code for the shell.
// `progress`: the job wants its progress line (--progress); drawn when stdout
// is a terminal (one node: the launcher relays mpirun's output, launch_relay.h).
int run_launch(const LaunchRequest& request, const Env& env, const std::vector<std::string>& args,
               bool progress = false);

// This executable (/proc/self/exe resolved), so the ranks run exactly this build.
std::string self_executable();

// Multi-node halves (launch_multinode.cc). `plan` holds request, host, exe and args.
int run_node0(MpirunPlan plan, const Env& env);
int run_node_k(MpirunPlan plan, const Env& env);

}  // namespace mtrain::launch
