#include "mtrain/launch/rendezvous.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

#include "common/errors.h"

namespace mtrain::launch {

namespace {

constexpr int kLookupRetryMs = 200;

[[noreturn]] void fail(int node, int local, const std::string& msg) {
  std::fflush(stdout);
  fmt::print(stderr, "mtrain: node {} local rank {}: {}\n", node, local, msg);
  std::fflush(stderr);
  _exit(static_cast<int>(ExitCode::kDistributed));
}

// Bounds the whole join: if it has not finished by the deadline, the rank
// prints why and exits with code 8; its mpirun then ends the node's other ranks.
// Makes no MPI call, so it may fire while the main thread is stuck inside MPI.
class JoinWatchdog {
 public:
  JoinWatchdog(const RankLaunchInfo& info, int local_rank, double timeout_s) {
    thread_ = std::thread([this, info, local_rank, timeout_s] {
      const double remaining =
          info.deadline_epoch_s -
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
      const auto wait = std::chrono::milliseconds(static_cast<long long>(std::max(0.0, remaining) * 1000));
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, wait, [this] { return done_; })) return;
      // Local rank 0 speaks for the node; the others give it a moment to be heard.
      if (local_rank != 0 && !cv_.wait_for(lock, std::chrono::milliseconds(500), [this] { return done_; })) _exit(8);
      if (done_) return;
      fail(info.node_rank, local_rank,
           fmt::format("rendezvous incomplete after {:g} s: the world of {} nodes did not form at {} (missing node? "
                       "see docs/LAUNCH.md)",
                       timeout_s, info.nnodes, info.endpoint));
    });
  }
  ~JoinWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

int comm_rank(MPI_Comm c) {
  int r = 0;
  MPI_Comm_rank(c, &r);
  return r;
}

int comm_size(MPI_Comm c) {
  int s = 0;
  MPI_Comm_size(c, &s);
  return s;
}

}  // namespace

std::string rendezvous_service_name(const std::string& rdzv_id, int node) {
  return fmt::format("{}-node{}", rdzv_id, node);
}

MpiWorld::MpiWorld(int* argc, char*** argv, const Env& env) {
  launch_ = read_rank_launch_info(env);
  std::unique_ptr<JoinWatchdog> watchdog;
  if (launch_.nnodes > 1) {
    const int local = static_cast<int>(parse_integer(env.get("OMPI_COMM_WORLD_RANK").value_or("0")).value_or(0));
    const double timeout = std::strtod(env.get("MTRAIN_RDZV_TIMEOUT").value_or("120").c_str(), nullptr);
    if (launch_.deadline_epoch_s <= 0) {
      launch_.deadline_epoch_s =
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() + timeout;
    }
    watchdog = std::make_unique<JoinWatchdog>(launch_, local, timeout);  // started before MPI_Init: it may hang too
  }
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    fail(launch_.node_rank, 0, "MPI_Init_thread failed");
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (launch_.nnodes > 1) {
    MPI_Comm_dup(MPI_COMM_WORLD, &node_);  // this node's mpirun job
    join_nodes();
  } else {
    MPI_Comm_dup(MPI_COMM_WORLD, &world_);
    MPI_Comm_split_type(world_, MPI_COMM_TYPE_SHARED, comm_rank(world_), MPI_INFO_NULL, &node_);
  }
  compute_node_layout();
  // From here on an MPI error is fatal for the job (reliability.md F6).
  MPI_Comm_set_errhandler(world_, MPI_ERRORS_ARE_FATAL);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  watchdog.reset();
  if (!launch_.joined_file.empty() && info_.local_rank == 0) {
    const int fd = open(launch_.joined_file.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    if (fd >= 0) close(fd);
  }
}

MpiWorld::~MpiWorld() = default;

void MpiWorld::join_nodes() {
  const int node = launch_.node_rank, nnodes = launch_.nnodes;
  const int local = comm_rank(node_);
  if (comm_size(node_) != launch_.nproc_per_node) {
    fail(node, local,
         fmt::format("this node's mpirun started {} ranks but NPROC_PER_NODE is {}", comm_size(node_),
                     launch_.nproc_per_node));
  }
  MPI_Comm cur;
  MPI_Comm_dup(node_, &cur);
  if (node == 0 && local == 0) {
    ports_.assign(nnodes, std::string());
    for (int k = 1; k < nnodes; ++k) {  // one port per joining node: fixes the order, no shared connect key
      char port[MPI_MAX_PORT_NAME] = {};
      if (MPI_Open_port(MPI_INFO_NULL, port) != MPI_SUCCESS) fail(node, local, "MPI_Open_port failed");
      ports_[k] = port;
      const std::string svc = rendezvous_service_name(launch_.rdzv_id, k);
      if (MPI_Publish_name(svc.c_str(), MPI_INFO_NULL, port) != MPI_SUCCESS) {
        fail(node, local, fmt::format("MPI_Publish_name({}) failed (is ompi-server reachable?)", svc));
      }
    }
  }
  if (node > 0) {
    char port[MPI_MAX_PORT_NAME] = {};
    if (local == 0) {  // Lookup does not wait for the publisher: poll
      const std::string svc = rendezvous_service_name(launch_.rdzv_id, node);
      while (MPI_Lookup_name(svc.c_str(), MPI_INFO_NULL, port) != MPI_SUCCESS) usleep(kLookupRetryMs * 1000);
    }
    MPI_Comm inter, merged;
    if (MPI_Comm_connect(port, MPI_INFO_NULL, 0, node_, &inter) != MPI_SUCCESS) {
      fail(node, local, "MPI_Comm_connect to node 0 failed");
    }
    MPI_Intercomm_merge(inter, 1, &merged);  // the newcomer goes high
    MPI_Comm_disconnect(&inter);             // fine on an intercommunicator
    MPI_Comm_free(&cur);
    cur = merged;
  }
  for (int k = node + 1; k < nnodes; ++k) {  // everyone already in accepts node k, in order
    MPI_Comm inter, merged;
    const char* port = comm_rank(cur) == 0 ? ports_[k].c_str() : nullptr;
    if (MPI_Comm_accept(port, MPI_INFO_NULL, 0, cur, &inter) != MPI_SUCCESS) {
      fail(node, local, fmt::format("MPI_Comm_accept for node {} failed", k));
    }
    MPI_Intercomm_merge(inter, 0, &merged);  // the existing group stays low
    MPI_Comm_disconnect(&inter);
    MPI_Comm_free(&cur);
    cur = merged;
  }
  world_ = cur;
  const int expected = node * launch_.nproc_per_node + local;
  if (comm_size(world_) != nnodes * launch_.nproc_per_node || comm_rank(world_) != expected) {
    fail(node, local,
         fmt::format("joined world has rank {}/{}, expected {}/{}", comm_rank(world_), comm_size(world_), expected,
                     nnodes * launch_.nproc_per_node));
  }
}

void MpiWorld::compute_node_layout() {
  info_.rank = comm_rank(world_);
  info_.size = comm_size(world_);
  info_.local_rank = comm_rank(node_);
  info_.local_size = comm_size(node_);
  if (launch_.nnodes > 1) {
    info_.node = launch_.node_rank;
    info_.nnodes = launch_.nnodes;
    return;
  }
  // Direct mpirun (possibly with a hostfile): number the hosts by their lowest rank.
  MPI_Comm leaders;
  MPI_Comm_split(world_, info_.local_rank == 0 ? 0 : MPI_UNDEFINED, info_.rank, &leaders);
  int layout[2] = {0, 1};
  if (leaders != MPI_COMM_NULL) {
    layout[0] = comm_rank(leaders);
    layout[1] = comm_size(leaders);
    MPI_Comm_free(&leaders);
  }
  MPI_Bcast(layout, 2, MPI_INT, 0, node_);
  info_.node = layout[0];
  info_.nnodes = layout[1];
}

void MpiWorld::finalize() {
  if (finalized_) return;
  finalized_ = true;
  for (size_t k = 1; k < ports_.size(); ++k) {
    const std::string svc = rendezvous_service_name(launch_.rdzv_id, static_cast<int>(k));
    MPI_Unpublish_name(svc.c_str(), MPI_INFO_NULL, ports_[k].c_str());
    MPI_Close_port(ports_[k].c_str());
  }
  MPI_Barrier(world_);
  MPI_Comm_free(&world_);  // not MPI_Comm_disconnect: it hangs on a merged intracommunicator
  MPI_Comm_free(&node_);
  MPI_Finalize();
}

void MpiWorld::abort(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(launch_.nnodes > 1 ? node_ : world_, exit_code);
  _exit(exit_code);
}

}  // namespace mtrain::launch
