#include "parallel/local_comm.h"

#include <fmt/format.h>

#include <cstddef>
#include <cstring>

#include "common/errors.h"

namespace mtrain::parallel {

void SelfComm::do_reduce_scatter(const void* in, void* out, int64_t chunk, ScalarType t, ReduceOp) {
  if (in != out) std::memmove(out, in, static_cast<size_t>(chunk) * scalar_bytes(t));
}

void SelfComm::do_all_gather(const void* in, void* out, int64_t chunk, ScalarType t) {
  if (in != out) std::memmove(out, in, static_cast<size_t>(chunk) * scalar_bytes(t));
}

void SelfComm::do_send_recv(const void* send_data, int64_t send_n, int, void* recv_data, int64_t recv_n, int,
                            ScalarType t, int tag) {
  if (send_n != recv_n) {
    throw DistributedError(fmt::format("comm '{}': rank 0 expected {} {} from rank 0 (tag {}) but got {}", name(),
                                       recv_n, scalar_type_name(t), tag, send_n));
  }
  if (send_data != recv_data) std::memmove(recv_data, send_data, static_cast<size_t>(send_n) * scalar_bytes(t));
}

void SelfComm::do_all_to_all_v(const void* in, const int64_t* send_counts, const int64_t* send_displs, void* out,
                               const int64_t*, const int64_t* recv_displs, ScalarType t) {
  const size_t esize = scalar_bytes(t);  // counts agree: checked by the front end
  if (send_counts[0] > 0) {
    std::memcpy(static_cast<std::byte*>(out) + recv_displs[0] * esize,
                static_cast<const std::byte*>(in) + send_displs[0] * esize, send_counts[0] * esize);
  }
}

MetaComm::MetaComm(std::string name, int rank, int size) : Comm(std::move(name)), rank_(rank), size_(size) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw Error(ExitCode::kInternal,
                fmt::format("comm '{}': rank {} of a group of {} ranks", this->name(), rank, size));
  }
}

}  // namespace mtrain::parallel
