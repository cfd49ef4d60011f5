// Inside a rank: MPI start-up, joining the nodes of a multi-node launch into
// one world, and the shutdown order that lets every mpirun exit cleanly.
//
// A multi-node launch (launch_run.h) runs one mpirun per node, each pointed at
// node 0's ompi-server. Each node's MPI_COMM_WORLD then holds only its own
// ranks; MpiWorld builds the job's world from them with the recipe measured in
// /work/shared/reference/openmpi-multinode.md §1: node 0's rank 0 opens and
// publishes one port per joining node, node k looks its port up (polling),
// connects and merges, and everyone already in accepts node k+1, k+2, ... in
// order, so that world rank = NODE_RANK * NPROC_PER_NODE + local rank.
// A watchdog thread (no MPI calls) ends the rank with exit code 8 and
// "rendezvous incomplete" if this has not finished by the launcher's deadline.
//
// Shutdown (finalize()): unpublish and close the ports, barrier, free the world
// (never MPI_Comm_disconnect on a merged communicator: it hangs), MPI_Finalize.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "mtrain/launch/launch_env.h"

namespace mtrain::launch {

struct WorldInfo {
  int rank = 0;
  int size = 1;
  int node = 0;  // NODE_RANK under a multi-node launch; else the index of this host among the job's hosts
  int nnodes = 1;
  int local_rank = 0;  // among the ranks of this node
  int local_size = 1;
};

class MpiWorld {
 public:
  // MPI_Init_thread (FUNNELED) and, under a multi-node launch, the join.
  // A failed join prints "mtrain: node N: ..." and exits with code 8.
  MpiWorld(int* argc, char*** argv, const Env& env);
  ~MpiWorld();
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  MPI_Comm comm() const { return world_; }
  MPI_Comm node_comm() const { return node_; }
  const WorldInfo& info() const { return info_; }

  // Collective over the world: the clean shutdown order above.
  void finalize();
  // Ends every rank of this node's mpirun at once (the other nodes follow via their launchers).
  [[noreturn]] void abort(int exit_code);

 private:
  void join_nodes();
  void compute_node_layout();

  RankLaunchInfo launch_;
  WorldInfo info_;
  MPI_Comm world_ = MPI_COMM_NULL;
  MPI_Comm node_ = MPI_COMM_NULL;
  std::vector<std::string> ports_;  // node 0 rank 0: ports_[k] for joining node k
  bool finalized_ = false;
};

// Service name under which node 0 publishes the port for node k.
std::string rendezvous_service_name(const std::string& rdzv_id, int node);

}  // namespace mtrain::launch
