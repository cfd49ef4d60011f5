// MpiComm's non-blocking collectives (see mpi_comm.h): the same rank-order
// folds as the blocking ones, in halves that MPI runs while the rank computes.
#include <cstring>
#include <utility>

#include "parallel/mpi_comm.h"
#include "parallel/reduce_kernels.h"

namespace mtrain::parallel {
namespace detail {

// One non-blocking collective of an MpiComm:
// - kTwoHalves (floating-point all_reduce): MPI_Ialltoallv of chunk k of
//   every buffer to rank k → fold in rank order (MpiComm::advance, in start
//   order) → MPI_Iallgatherv of the reduced chunks on the second-half comm;
// - kScatter (reduce_scatter): MPI_Ialltoall → fold into the output;
// - kExact (integer all_reduce, exact in any order): MPI_Iallreduce;
// - kGather (all_gather, nothing to fold): MPI_Iallgather.
class MpiPendingCollective final : public PendingCollective {
 public:
  enum class Kind { kTwoHalves, kScatter, kExact, kGather };
  MpiPendingCollective(MpiComm& comm, Kind kind, void* out, int64_t n, ScalarType t, ReduceOp op)
      : comm_(&comm), kind_(kind), out_(out), n_(n), type_(t), op_(op) {}
  ~MpiPendingCollective() override;

  bool test() override;
  void wait() override;

  // The first half: MPI_Test (block = false) or MPI_Wait; true once it is complete.
  bool first_half_done(bool block);
  void fold_and_start_second_half();

  // What MPI reads and writes until the collective completes.
  struct Buffers {
    std::vector<std::byte> scratch;              // (size, chunk) the chunks received for the fold
    std::vector<int> send_counts, send_offsets;  // (size) elements; also the all-gather layout
    std::vector<int> recv_counts, recv_offsets;  // (size) elements
  };
  Buffers& buffers() { return *buffers_; }
  MPI_Request* request() { return &request_; }
  int64_t mine = 0;  // kTwoHalves: elements of this rank's chunk of the buffer

 private:
  void fold_scatter();

  MpiComm* comm_;
  Kind kind_;
  void* out_;  // kTwoHalves, kExact: the data; kScatter: the output chunk
  int64_t n_;  // elements: of the buffer, or of the chunk (kScatter)
  ScalarType type_;
  ReduceOp op_;
  std::unique_ptr<Buffers> buffers_ = std::make_unique<Buffers>();
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool second_half_ = false;
  bool done_ = false;
};

MpiPendingCollective::~MpiPendingCollective() {
  std::erase(comm_->awaiting_fold_, this);
  if (request_ == MPI_REQUEST_NULL) {
    comm_->give_buffer(std::move(buffers_->scratch));
  } else {
    // Unfinished after an error: MPI may still use the buffers and the request
    // of a collective cannot be freed, so they are leaked (the job is failing).
    static_cast<void>(buffers_.release());
  }
}

bool MpiPendingCollective::first_half_done(bool block) {
  if (block) {
    comm_->check(MPI_Wait(&request_, MPI_STATUS_IGNORE), "MPI_Wait");
    return true;
  }
  int flag = 0;
  comm_->check(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE), "MPI_Test");
  return flag != 0;
}

void MpiPendingCollective::fold_and_start_second_half() {
  const int size = comm_->size_;
  const size_t esize = scalar_bytes(type_);
  std::vector<const void*> inputs(size);
  for (int k = 0; k < size; ++k) inputs[k] = buffers_->scratch.data() + k * mine * esize;
  auto* data = static_cast<std::byte*>(out_);
  reduce_in_rank_order(data + buffers_->send_offsets[comm_->rank_] * esize, inputs.data(), size, mine, type_, op_);
  comm_->give_buffer(std::move(buffers_->scratch));
  comm_->check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out_, buffers_->send_counts.data(),
                               buffers_->send_offsets.data(), mpi_type(type_), comm_->second_half_comm(), &request_),
               "MPI_Iallgatherv");
  second_half_ = true;
}

void MpiPendingCollective::fold_scatter() {
  const int size = comm_->size_;
  std::vector<const void*> inputs(size);
  for (int k = 0; k < size; ++k) inputs[k] = buffers_->scratch.data() + k * n_ * scalar_bytes(type_);
  reduce_in_rank_order(out_, inputs.data(), size, n_, type_, op_);
}

bool MpiPendingCollective::test() {
  if (done_) return true;
  if (kind_ == Kind::kTwoHalves && !second_half_) {
    comm_->advance(nullptr);  // first halves are only completed in start order
    if (!second_half_) return false;
  }
  int flag = 0;
  comm_->check(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE), "MPI_Test");
  if (!flag) return false;
  if (kind_ == Kind::kScatter) fold_scatter();
  done_ = true;
  return true;
}

void MpiPendingCollective::wait() {
  if (done_) return;
  if (kind_ == Kind::kTwoHalves && !second_half_) comm_->advance(this);
  comm_->check(MPI_Wait(&request_, MPI_STATUS_IGNORE), "MPI_Wait");
  if (kind_ == Kind::kScatter) fold_scatter();
  done_ = true;
}

}  // namespace detail

using detail::is_floating;
using detail::mpi_op;
using detail::mpi_type;
using detail::MpiPendingCollective;

void MpiComm::advance(const MpiPendingCollective* until, bool block_all) {
  bool block = block_all || until != nullptr;
  while (!awaiting_fold_.empty()) {
    MpiPendingCollective* p = awaiting_fold_.front();
    if (!p->first_half_done(block)) return;
    awaiting_fold_.pop_front();
    p->fold_and_start_second_half();
    if (p == until) block = block_all;
  }
}

MPI_Comm MpiComm::second_half_comm() {
  if (second_half_comm_ == MPI_COMM_NULL) {
    check(MPI_Comm_dup(comm_, &second_half_comm_), "MPI_Comm_dup");
    check(MPI_Comm_set_errhandler(second_half_comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  }
  return second_half_comm_;
}

std::vector<std::byte> MpiComm::take_buffer(size_t bytes) {
  std::vector<std::byte> buffer;
  if (!spare_buffers_.empty()) {
    buffer = std::move(spare_buffers_.back());
    spare_buffers_.pop_back();
  }
  buffer.resize(bytes);
  return buffer;
}

void MpiComm::give_buffer(std::vector<std::byte> buffer) {
  if (buffer.capacity() > 0) spare_buffers_.push_back(std::move(buffer));
}

std::unique_ptr<detail::PendingCollective> MpiComm::do_start_all_reduce(void* data, int64_t n, ScalarType t,
                                                                        ReduceOp op) {
  advance(nullptr);  // progress on the earlier ones; never blocks
  if (size_ == 1 || n == 0) return nullptr;
  const MPI_Datatype type = mpi_type(t);
  if (!is_floating(t)) {
    auto p = std::make_unique<MpiPendingCollective>(*this, MpiPendingCollective::Kind::kExact, data, n, t, op);
    check(MPI_Iallreduce(MPI_IN_PLACE, data, count(n, "start_all_reduce"), type, mpi_op(op), comm_, p->request()),
          "MPI_Iallreduce");
    return p;
  }
  second_half_comm();  // made (collectively) before the first half, at the same place on every rank
  auto p = std::make_unique<MpiPendingCollective>(*this, MpiPendingCollective::Kind::kTwoHalves, data, n, t, op);
  const detail::ChunkLayout layout = detail::chunk_layout(n, size_);
  const int64_t mine = p->mine = layout.counts[rank_];
  MpiPendingCollective::Buffers& b = p->buffers();
  for (int k = 0; k < size_; ++k) {
    b.send_counts.push_back(count(layout.counts[k], "start_all_reduce"));
    b.send_offsets.push_back(count(layout.offsets[k], "start_all_reduce"));
    b.recv_counts.push_back(static_cast<int>(mine));
    b.recv_offsets.push_back(count(k * mine, "start_all_reduce"));
  }
  b.scratch = take_buffer(size_ * mine * scalar_bytes(t));
  check(MPI_Ialltoallv(data, b.send_counts.data(), b.send_offsets.data(), type, b.scratch.data(), b.recv_counts.data(),
                       b.recv_offsets.data(), type, comm_, p->request()),
        "MPI_Ialltoallv");
  awaiting_fold_.push_back(p.get());
  return p;
}

std::unique_ptr<detail::PendingCollective> MpiComm::do_start_reduce_scatter(const void* in, void* out, int64_t chunk,
                                                                            ScalarType t, ReduceOp op) {
  advance(nullptr);
  const size_t bytes = static_cast<size_t>(chunk) * scalar_bytes(t);
  if (size_ == 1) {
    if (in != out && bytes) std::memmove(out, in, bytes);
    return nullptr;
  }
  if (chunk == 0) return nullptr;
  auto p = std::make_unique<MpiPendingCollective>(*this, MpiPendingCollective::Kind::kScatter, out, chunk, t, op);
  p->buffers().scratch = take_buffer(size_ * bytes);
  const int c = count(chunk, "start_reduce_scatter");
  check(MPI_Ialltoall(in, c, mpi_type(t), p->buffers().scratch.data(), c, mpi_type(t), comm_, p->request()),
        "MPI_Ialltoall");
  return p;
}

std::unique_ptr<detail::PendingCollective> MpiComm::do_start_all_gather(const void* in, void* out, int64_t chunk,
                                                                        ScalarType t) {
  advance(nullptr);
  const size_t bytes = static_cast<size_t>(chunk) * scalar_bytes(t);
  const bool in_place = in == static_cast<std::byte*>(out) + rank_ * bytes;
  if (size_ == 1) {
    if (!in_place && bytes) std::memmove(out, in, bytes);
    return nullptr;
  }
  if (chunk == 0) return nullptr;
  auto p =
      std::make_unique<MpiPendingCollective>(*this, MpiPendingCollective::Kind::kGather, out, chunk, t, ReduceOp::kSum);
  const int c = count(chunk, "start_all_gather");
  check(MPI_Iallgather(in_place ? MPI_IN_PLACE : in, in_place ? 0 : c, in_place ? MPI_DATATYPE_NULL : mpi_type(t), out,
                       c, mpi_type(t), comm_, p->request()),
        "MPI_Iallgather");
  return p;
}

}  // namespace mtrain::parallel
