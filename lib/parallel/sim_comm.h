// SimComm (sim_comm.cc): N ranks as threads of one process, with the
// semantics of MpiComm (comm.h), for single-process tests of scheduling logic
// and for dry runs that want real data. A SimWorld is the shared "network":
// each communicator (a name + member list) gets a rendezvous for collectives
// and a mailbox for point-to-point messages; SimWorld::make_comm hands out
// the SimComm of one member.
//
// Stricter than MPI where that finds bugs early:
// - collectives check that every rank called the same op with the same
//   type, count, reduction and root (MPI would hang or corrupt); a
//   non-blocking collective (a copy of the input deposited at start, the
//   rank's result folded at completion) is matched by its position among
//   the rank's collectives on the communicator, like MPI does, and one that
//   meets a blocking collective at the same position fails at once;
// - send is synchronous by default (returns once the receiver has the data),
//   so a schedule that relies on MPI's eager buffering deadlocks here; an
//   isend copies eagerly, and its request completes once the receiver has it;
// - every wait is bounded: past SimWorldOptions::timeout_seconds the rank fails with
//   a DistributedError naming the group, op and peer, and the world aborts so
//   every other rank fails promptly instead of hanging.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "parallel/comm.h"
#include "parallel/parallel_state.h"

namespace mtrain::parallel {

namespace detail {
struct SimGroup;
}

struct SimWorldOptions {
  double timeout_seconds = 60.0;  // bound on any single wait (deadlock guard)
  bool synchronous_send = true;   // false: send copies the message and returns (eager buffering)
};

class SimWorld {
 public:
  explicit SimWorld(int size, SimWorldOptions options = SimWorldOptions{});
  SimWorld(const SimWorld&) = delete;
  SimWorld& operator=(const SimWorld&) = delete;
  ~SimWorld();

  int size() const { return size_; }
  const SimWorldOptions& options() const { return options_; }

  // The communicator over `members` (global ranks, in group-rank order) as
  // seen by member `global_rank`. Thread-safe. The k-th call by each member
  // for the same (name, members) returns the k-th instance, so like
  // MPI_Comm_split every call creates a fresh, independent communicator.
  std::unique_ptr<Comm> make_comm(const std::string& name, const RankGroup& members, int global_rank);
  // make_comm("world", {0..size-1}, global_rank).
  std::unique_ptr<Comm> make_world_comm(int global_rank);

  // Runs body(rank) for every rank on its own thread and joins them. If any
  // rank throws, the world is aborted (the others fail at their next wait)
  // and the first root-cause exception is rethrown. An aborted world stays
  // aborted: build a new one for the next run.
  void run(const std::function<void(int rank)>& body);

  // Makes every current and future wait fail with `reason`.
  void abort(const std::string& reason);
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  std::string abort_reason() const;

 private:
  int size_;
  SimWorldOptions options_;
  std::atomic<bool> aborted_{false};
  mutable std::mutex mu_;
  std::string abort_reason_;
  // (name|members) -> instances; per key, how many each global rank has taken.
  std::map<std::string, std::vector<std::shared_ptr<detail::SimGroup>>> instances_;
  std::map<std::string, std::vector<int>> taken_;
};

// This rank's ParallelState with a SimComm for the world and each group.
// Every rank (thread) of `world` calls it with its own rank.
ParallelState make_sim_parallel_state(const ProcessGrid& grid, SimWorld& world, int rank);

}  // namespace mtrain::parallel
