#include "parallel/mpi_comm.h"

#include <fmt/format.h>

#include <climits>
#include <cstring>

#include "common/errors.h"
#include "parallel/reduce_kernels.h"

namespace mtrain::parallel {
namespace detail {

MPI_Datatype mpi_type(ScalarType t) {
  switch (t) {
    case ScalarType::kF32:
      return MPI_FLOAT;
    case ScalarType::kF64:
      return MPI_DOUBLE;
    case ScalarType::kI32:
      return MPI_INT32_T;
    case ScalarType::kI64:
      return MPI_INT64_T;
    case ScalarType::kU8:
      return MPI_UINT8_T;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return MPI_SUM;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kMin:
      return MPI_MIN;
  }
  return MPI_SUM;
}

bool is_floating(ScalarType t) { return t == ScalarType::kF32 || t == ScalarType::kF64; }

}  // namespace detail

namespace {

using detail::is_floating;
using detail::mpi_op;
using detail::mpi_type;

std::string mpi_error_string(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return fmt::format("MPI error {}", rc);
  return std::string(text, len);
}

}  // namespace

namespace detail {

// One MPI_Isend and the copy it sends from. Abandoned before completion, it
// hands both to its MpiComm, which frees them once MPI is done with them.
class MpiPendingSend final : public PendingSend {
 public:
  MpiPendingSend(MpiComm& comm, std::unique_ptr<std::byte[]> payload) : comm_(&comm), payload_(std::move(payload)) {}
  ~MpiPendingSend() override {
    if (request_ != MPI_REQUEST_NULL) comm_->adopt({request_, std::move(payload_)});
  }
  bool test() override {
    int flag = 0;
    comm_->check(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE), "MPI_Test");
    return flag != 0;
  }
  void wait() override { comm_->check(MPI_Wait(&request_, MPI_STATUS_IGNORE), "MPI_Wait"); }
  MPI_Request* request() { return &request_; }
  const std::byte* payload() const { return payload_.get(); }

 private:
  MpiComm* comm_;
  std::unique_ptr<std::byte[]> payload_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

}  // namespace detail

MpiComm::MpiComm(MPI_Comm comm, std::string name) : Comm(std::move(name)), comm_(comm) {
  check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
}

MpiComm::~MpiComm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  reap_orphans();
  for (OrphanSend& o : orphans_) {
    // Never received: the job is failing. MPI may still read the payload, so
    // it is deliberately leaked rather than freed under a live transfer.
    MPI_Request_free(&o.request);
    static_cast<void>(o.payload.release());
  }
  if (second_half_comm_ != MPI_COMM_NULL) MPI_Comm_free(&second_half_comm_);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiComm::reap_orphans() {
  std::erase_if(orphans_, [](OrphanSend& o) {
    int flag = 0;
    return MPI_Test(&o.request, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag != 0;
  });
}

std::unique_ptr<MpiComm> MpiComm::duplicate(MPI_Comm comm, std::string name) {
  MPI_Comm copy = MPI_COMM_NULL;
  const int rc = MPI_Comm_dup(comm, &copy);
  if (rc != MPI_SUCCESS)
    throw DistributedError(fmt::format("MPI_Comm_dup for '{}' failed: {}", name, mpi_error_string(rc)));
  return std::make_unique<MpiComm>(copy, std::move(name));
}

void MpiComm::check(int rc, const char* call) const {
  if (rc != MPI_SUCCESS) {
    throw DistributedError(
        fmt::format("comm '{}': {} failed on rank {} of {}: {}", name(), call, rank_, size_, mpi_error_string(rc)),
        "another rank may have died; check the first error printed by the job");
  }
}

int MpiComm::count(int64_t n, const char* call) const {
  if (n > INT_MAX) {
    throw DistributedError(fmt::format("comm '{}': {} of {} elements exceeds MPI's int count", name(), call, n),
                           "split the buffer into buckets of at most 2^31-1 elements");
  }
  return static_cast<int>(n);
}

void MpiComm::check_received(const MPI_Status& status, int64_t n, ScalarType t, int peer, int tag) const {
  int got = 0;
  check(MPI_Get_count(&status, mpi_type(t), &got), "MPI_Get_count");
  if (got != n) {
    throw DistributedError(
        fmt::format("comm '{}': rank {} expected {} {} from rank {} (tag {}) but the message holds {}", name(), rank_,
                    n, scalar_type_name(t), peer, tag, got));
  }
}

void MpiComm::do_all_reduce(void* data, int64_t n, ScalarType t, ReduceOp op) {
  drain();
  if (size_ == 1 || n == 0) return;
  const MPI_Datatype type = mpi_type(t);
  if (!is_floating(t)) {  // exact in any order
    check(MPI_Allreduce(MPI_IN_PLACE, data, count(n, "all_reduce"), type, mpi_op(op), comm_), "MPI_Allreduce");
    return;
  }
  // Scatter: rank k receives chunk k of every buffer; fold in rank order; gather.
  const detail::ChunkLayout layout = detail::chunk_layout(n, size_);
  const int64_t mine = layout.counts[rank_];
  const size_t esize = scalar_bytes(t);
  send_counts_.resize(size_), send_offsets_.resize(size_), recv_counts_.resize(size_), recv_offsets_.resize(size_);
  for (int k = 0; k < size_; ++k) {
    send_counts_[k] = count(layout.counts[k], "all_reduce");
    send_offsets_[k] = count(layout.offsets[k], "all_reduce");
    recv_counts_[k] = static_cast<int>(mine);
    recv_offsets_[k] = count(k * mine, "all_reduce");
  }
  scratch_.resize(size_ * mine * esize);
  check(MPI_Alltoallv(data, send_counts_.data(), send_offsets_.data(), type, scratch_.data(), recv_counts_.data(),
                      recv_offsets_.data(), type, comm_),
        "MPI_Alltoallv");
  inputs_.resize(size_);
  for (int k = 0; k < size_; ++k) inputs_[k] = scratch_.data() + k * mine * esize;
  detail::reduce_in_rank_order(static_cast<std::byte*>(data) + layout.offsets[rank_] * esize, inputs_.data(), size_,
                               mine, t, op);
  check(
      MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, send_counts_.data(), send_offsets_.data(), type, comm_),
      "MPI_Allgatherv");
}

void MpiComm::do_reduce_scatter(const void* in, void* out, int64_t chunk, ScalarType t, ReduceOp op) {
  drain();
  const size_t bytes = static_cast<size_t>(chunk) * scalar_bytes(t);
  if (size_ == 1) {
    if (in != out && bytes) std::memmove(out, in, bytes);
    return;
  }
  scratch_.resize(size_ * bytes);
  const int c = count(chunk, "reduce_scatter");
  check(MPI_Alltoall(in, c, mpi_type(t), scratch_.data(), c, mpi_type(t), comm_), "MPI_Alltoall");
  inputs_.resize(size_);
  for (int k = 0; k < size_; ++k) inputs_[k] = scratch_.data() + k * bytes;
  detail::reduce_in_rank_order(out, inputs_.data(), size_, chunk, t, op);
}

void MpiComm::do_all_gather(const void* in, void* out, int64_t chunk, ScalarType t) {
  drain();
  const size_t bytes = static_cast<size_t>(chunk) * scalar_bytes(t);
  const int c = count(chunk, "all_gather");
  if (in == static_cast<std::byte*>(out) + rank_ * bytes) {
    check(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, c, mpi_type(t), comm_), "MPI_Allgather");
  } else {
    check(MPI_Allgather(in, c, mpi_type(t), out, c, mpi_type(t), comm_), "MPI_Allgather");
  }
}

void MpiComm::do_broadcast(void* data, int64_t n, ScalarType t, int root) {
  drain();
  check(MPI_Bcast(data, count(n, "broadcast"), mpi_type(t), root, comm_), "MPI_Bcast");
}

void MpiComm::do_send(const void* data, int64_t n, ScalarType t, int peer, int tag) {
  drain();
  check(MPI_Send(data, count(n, "send"), mpi_type(t), peer, tag, comm_), "MPI_Send");
}

void MpiComm::do_recv(void* data, int64_t n, ScalarType t, int peer, int tag) {
  drain();
  MPI_Status status;
  check(MPI_Recv(data, count(n, "recv"), mpi_type(t), peer, tag, comm_, &status), "MPI_Recv");
  check_received(status, n, t, peer, tag);
}

void MpiComm::do_send_recv(const void* send_data, int64_t send_n, int dest, void* recv_data, int64_t recv_n, int src,
                           ScalarType t, int tag) {
  drain();
  MPI_Status status;
  check(MPI_Sendrecv(send_data, count(send_n, "send_recv"), mpi_type(t), dest, tag, recv_data,
                     count(recv_n, "send_recv"), mpi_type(t), src, tag, comm_, &status),
        "MPI_Sendrecv");
  check_received(status, recv_n, t, src, tag);
}

std::unique_ptr<detail::PendingSend> MpiComm::do_isend(const void* data, int64_t n, ScalarType t, int peer, int tag) {
  reap_orphans();
  advance(nullptr);  // progress only: an isend never blocks
  const int c = count(n, "isend");
  const size_t bytes = static_cast<size_t>(n) * scalar_bytes(t);
  auto payload = std::make_unique_for_overwrite<std::byte[]>(bytes);
  if (bytes) std::memcpy(payload.get(), data, bytes);
  auto pending = std::make_unique<detail::MpiPendingSend>(*this, std::move(payload));
  check(MPI_Isend(pending->payload(), c, mpi_type(t), peer, tag, comm_, pending->request()), "MPI_Isend");
  return pending;
}

void MpiComm::do_all_to_all_v(const void* in, const int64_t* send_counts, const int64_t* send_displs, void* out,
                              const int64_t* recv_counts, const int64_t* recv_displs, ScalarType t) {
  drain();
  send_counts_.resize(size_), send_offsets_.resize(size_), recv_counts_.resize(size_), recv_offsets_.resize(size_);
  for (int k = 0; k < size_; ++k) {  // MPI counts and displacements are int
    send_counts_[k] = count(send_counts[k], "all_to_all_v");
    send_offsets_[k] = count(send_displs[k], "all_to_all_v");
    recv_counts_[k] = count(recv_counts[k], "all_to_all_v");
    recv_offsets_[k] = count(recv_displs[k], "all_to_all_v");
  }
  check(MPI_Alltoallv(in, send_counts_.data(), send_offsets_.data(), mpi_type(t), out, recv_counts_.data(),
                      recv_offsets_.data(), mpi_type(t), comm_),
        "MPI_Alltoallv");
}

void MpiComm::do_barrier() {
  drain();
  check(MPI_Barrier(comm_), "MPI_Barrier");
}

// --- runtime and parallel state ---------------------------------------------

MpiRuntime::MpiRuntime(int* argc, char*** argv, int required_thread_level) {
  int provided = 0;
  if (MPI_Init_thread(argc, argv, required_thread_level, &provided) != MPI_SUCCESS) {
    throw DistributedError("MPI_Init_thread failed", "is the job started with mpirun from the same Open MPI?");
  }
  if (provided < required_thread_level) {
    MPI_Finalize();
    throw DistributedError(
        fmt::format("MPI provides thread level {} but {} is required", provided, required_thread_level));
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

ParallelState make_mpi_parallel_state(const ProcessGrid& grid, MPI_Comm world) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) throw DistributedError("MPI is not initialised", "construct an MpiRuntime first");
  auto world_comm = MpiComm::duplicate(world, "world");
  if (world_comm->size() != grid.world_size()) {
    throw DistributedError(
        fmt::format("the process grid has {} ranks but the MPI world has {}", grid.world_size(), world_comm->size()),
        "the parallel sizes were planned for another world size; start as many ranks as planned");
  }
  const int rank = world_comm->rank();
  ParallelState::GroupComms groups;
  for (int k = 0; k < kGroupKindCount; ++k) {  // collective: same order on every rank
    const auto kind = static_cast<GroupKind>(k);
    const int index = grid.group_index(kind, rank);
    MPI_Comm split = MPI_COMM_NULL;
    const int rc =
        MPI_Comm_split(world_comm->handle(), index < 0 ? MPI_UNDEFINED : index, grid.rank_in_group(kind, rank), &split);
    if (rc != MPI_SUCCESS) {
      throw DistributedError(fmt::format("MPI_Comm_split for group '{}' failed on rank {}: {}", group_kind_name(kind),
                                         rank, mpi_error_string(rc)));
    }
    if (split != MPI_COMM_NULL) groups[k] = std::make_unique<MpiComm>(split, group_kind_name(kind));
  }
  return ParallelState(grid, rank, std::move(world_comm), std::move(groups));
}

}  // namespace mtrain::parallel
