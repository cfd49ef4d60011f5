// Internal to lib/parallel: the shared state behind SimComm (sim_comm.cc)
// and SimWorld (sim_world.cc). One SimGroup per communicator instance is
// the "network" its members meet in: a rendezvous for blocking collectives,
// numbered slots for non-blocking ones, a mailbox for point-to-point messages.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/errors.h"
#include "parallel/comm.h"
#include "parallel/process_grid.h"

namespace mtrain::parallel {

class SimWorld;

namespace detail {

// What one rank brought to a collective.
struct Post {
  CommOp op = CommOp::kBarrier;
  ScalarType type = ScalarType::kF32;
  ReduceOp reduce = ReduceOp::kSum;
  int64_t n = 0;
  int root = -1;
  const void* in = nullptr;  // blocking collectives: the caller's buffer, read by every rank
  uint64_t seq = 0;          // the rank's count of collectives on this communicator before this one
  bool nonblocking = false;  // started with start_*
  // all_to_all_v: (size) per-peer counts and displacements, the caller's
  // arrays (n is the total sent, which may differ between ranks).
  const int64_t* send_counts = nullptr;
  const int64_t* send_displs = nullptr;
  const int64_t* recv_counts = nullptr;
};

// A point-to-point message in flight. Synchronous sends lend their buffer
// (`data`) until the receiver marks the message consumed; buffered sends and
// isends copy. An abandoned isend's message is erased by its receiver.
struct Message {
  int src = 0, dst = 0, tag = 0;
  ScalarType type = ScalarType::kF32;
  int64_t n = 0;
  const void* data = nullptr;
  std::vector<std::byte> copy{};
  bool consumed = false;
  bool orphaned = false;
};

// One non-blocking collective, keyed by its sequence number. Every rank
// deposits a copy of its input when it starts the collective and folds its
// result from the deposits when it completes, so requests complete in any
// order and no rank waits for another one's wait().
struct CollectiveSlot {
  explicit CollectiveSlot(int size) : posts(size), deposits(size) {}
  std::vector<Post> posts;                       // (size)
  std::vector<std::vector<std::byte>> deposits;  // (size) inputs; immutable once all are in
  int deposited = 0;
  int collected = 0;  // ranks that have folded their result
  std::string error;  // set by the last depositor when the posts disagree
};

struct SimGroup {
  SimGroup(std::string n, RankGroup m)
      : name(std::move(n)), members(std::move(m)), posts(members.size()), blocking_seq(members.size(), -1) {}
  std::string name;
  RankGroup members;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  std::vector<Post> posts;            // (size) the current blocking collective
  std::string phase_error;            // set by the last arriver when the posts disagree
  std::vector<int64_t> blocking_seq;  // (size) seq of the blocking collective a rank waits in, or -1
  std::map<uint64_t, std::shared_ptr<CollectiveSlot>> slots;  // non-blocking collectives in flight
  std::list<Message> messages;                                // in send order; list iterators stay valid
};

// Thrown by ranks that stop because another rank failed; SimWorld::run
// prefers the root cause.
struct SimAbortedError : DistributedError {
  using DistributedError::DistributedError;
};

// The SimComm of group rank `rank` in `group`.
std::unique_ptr<Comm> make_sim_comm(SimWorld& world, std::shared_ptr<SimGroup> group, int rank);

}  // namespace detail
}  // namespace mtrain::parallel
