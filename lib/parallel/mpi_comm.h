// MpiComm: Comm over an MPI communicator (one MPI rank per simulated NPU).
// The only mtrain header that includes <mpi.h>; a target that includes it
// links MPI::MPI_CXX itself (mtrain_parallel links MPI privately).
//
// Determinism: MPI_Allreduce(MPI_SUM) on floats may sum in an order that
// depends on the algorithm Open MPI picks (message size, rank count, tuning),
// so floating-point reductions are built from pure data movement instead:
// MPI_Alltoallv hands rank k chunk k of every rank's buffer, rank k folds the
// chunks in rank order (reduce_kernels.h), and MPI_Allgatherv returns the
// reduced chunks to everyone. Same bytes on the wire as a ring all-reduce,
// and the result equals SimComm's bit for bit. Integer reductions, which are
// exact in any order, use MPI_Allreduce.
//
// Non-blocking (mpi_comm_nonblocking.cc): start_all_reduce starts the
// MPI_Ialltoallv at once; the fold and the MPI_Iallgatherv of the reduced
// chunks follow when this rank next calls into the Comm after the first half
// has arrived (start_*, done(), wait(), or any blocking call, which first
// completes the first halves in flight so that MPI's progress rules hold).
// The second halves run on a duplicate communicator, started in the order the
// collectives were started whatever order they are waited in, so MPI matches
// them on every rank. start_reduce_scatter is one MPI_Ialltoall + the fold;
// start_all_gather one MPI_Iallgather. all_to_all_v is MPI_Alltoallv.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // C API only: no deprecated C++ bindings
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "parallel/comm.h"
#include "parallel/parallel_state.h"

namespace mtrain::parallel {

namespace detail {
class MpiPendingSend;        // mpi_comm.cc
class MpiPendingCollective;  // mpi_comm_nonblocking.cc
MPI_Datatype mpi_type(ScalarType t);
MPI_Op mpi_op(ReduceOp op);
bool is_floating(ScalarType t);
}  // namespace detail

class MpiComm final : public Comm {
  friend class detail::MpiPendingSend;
  friend class detail::MpiPendingCollective;

 public:
  // Takes ownership of `comm` (freed by the destructor, which must run before
  // MPI_Finalize) and makes MPI errors on it return codes, which become
  // DistributedError naming the group, call and rank.
  MpiComm(MPI_Comm comm, std::string name);
  ~MpiComm() override;
  // A communicator of its own over the same ranks as `comm` (MPI_Comm_dup).
  static std::unique_ptr<MpiComm> duplicate(MPI_Comm comm, std::string name);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MPI_Comm handle() const { return comm_; }

 protected:
  void do_all_reduce(void* data, int64_t n, ScalarType t, ReduceOp op) override;
  void do_reduce_scatter(const void* in, void* out, int64_t chunk, ScalarType t, ReduceOp op) override;
  void do_all_gather(const void* in, void* out, int64_t chunk, ScalarType t) override;
  void do_broadcast(void* data, int64_t n, ScalarType t, int root) override;
  void do_send(const void* data, int64_t n, ScalarType t, int peer, int tag) override;
  void do_recv(void* data, int64_t n, ScalarType t, int peer, int tag) override;
  void do_send_recv(const void* send_data, int64_t send_n, int dest, void* recv_data, int64_t recv_n, int src,
                    ScalarType t, int tag) override;
  void do_barrier() override;
  void do_all_to_all_v(const void* in, const int64_t* send_counts, const int64_t* send_displs, void* out,
                       const int64_t* recv_counts, const int64_t* recv_displs, ScalarType t) override;
  // MPI_Isend of a copy the request owns.
  std::unique_ptr<detail::PendingSend> do_isend(const void* data, int64_t n, ScalarType t, int peer, int tag) override;
  std::unique_ptr<detail::PendingCollective> do_start_all_reduce(void* data, int64_t n, ScalarType t,
                                                                 ReduceOp op) override;
  std::unique_ptr<detail::PendingCollective> do_start_reduce_scatter(const void* in, void* out, int64_t chunk,
                                                                     ScalarType t, ReduceOp op) override;
  std::unique_ptr<detail::PendingCollective> do_start_all_gather(const void* in, void* out, int64_t chunk,
                                                                 ScalarType t) override;

 private:
  // An abandoned isend still in flight: its payload must outlive the transfer.
  struct OrphanSend {
    MPI_Request request = MPI_REQUEST_NULL;
    std::unique_ptr<std::byte[]> payload;
  };
  void adopt(OrphanSend orphan) { orphans_.push_back(std::move(orphan)); }
  void reap_orphans();  // frees the orphans whose transfer has completed

  // Non-blocking collectives. advance(): completes the first halves of the
  // queued all-reduces in start order, folding each and starting its second
  // half; blocks for those up to `until` (all of them with block_all), and
  // otherwise stops at the first still in flight.
  void advance(const detail::MpiPendingCollective* until, bool block_all = false);
  void drain() {  // before any blocking call on comm_
    if (!awaiting_fold_.empty()) advance(nullptr, /*block_all=*/true);
  }
  MPI_Comm second_half_comm();  // MPI_Comm_dup of comm_, made on first use (collective)
  std::vector<std::byte> take_buffer(size_t bytes);
  void give_buffer(std::vector<std::byte> buffer);

  void check(int rc, const char* call) const;
  int count(int64_t n, const char* call) const;  // MPI counts are int
  void check_received(const MPI_Status& status, int64_t n, ScalarType t, int peer, int tag) const;

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::vector<std::byte> scratch_;               // (size, chunk) received chunks of a reduction
  std::vector<const void*> inputs_;              // (size) pointers into scratch_
  std::vector<int> send_counts_, send_offsets_;  // (size) in elements
  std::vector<int> recv_counts_, recv_offsets_;  // (size) in elements
  std::vector<OrphanSend> orphans_;
  MPI_Comm second_half_comm_ = MPI_COMM_NULL;
  std::deque<detail::MpiPendingCollective*> awaiting_fold_;  // all-reduces in their first half, in start order
  std::vector<std::vector<std::byte>> spare_buffers_;        // reused scratch of finished collectives
};

// Initialises MPI for the process lifetime (MPI_Init_thread / MPI_Finalize).
// Construct it before, and destroy it after, every MpiComm.
class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv, int required_thread_level = MPI_THREAD_FUNNELED);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
  int world_rank() const { return rank_; }
  int world_size() const { return size_; }

 private:
  int rank_ = 0, size_ = 1;
};

// This rank's ParallelState over `world` (collective: every rank of `world`
// calls it). World rank r is grid rank r; the sizes must agree. Groups are
// created with MPI_Comm_split, one communicator per group kind, in
// GroupKind order; middle pipeline stages get no embedding communicator.
ParallelState make_mpi_parallel_state(const ProcessGrid& grid, MPI_Comm world = MPI_COMM_WORLD);

}  // namespace mtrain::parallel
