#include "parallel/comm.h"

#include <fmt/format.h>

#include <chrono>
#include <utility>

#include "common/errors.h"
#include "device/cost_model.h"

namespace mtrain::parallel {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int64_t wire_bytes(int64_t elements, ScalarType t, Wire wire) {
  return elements * (wire.element_bytes > 0 ? wire.element_bytes : scalar_bytes(t));
}

}  // namespace

device::Collective cost_collective(CommOp op) {
  switch (op) {
    case CommOp::kAllReduce:
      return device::Collective::kAllReduce;
    case CommOp::kAllGather:
      return device::Collective::kAllGather;
    case CommOp::kReduceScatter:
      return device::Collective::kReduceScatter;
    case CommOp::kBroadcast:
      return device::Collective::kBroadcast;
    case CommOp::kSend:
    case CommOp::kRecv:
    case CommOp::kSendRecv:
      return device::Collective::kPointToPoint;
    case CommOp::kBarrier:
      return device::Collective::kBarrier;
  }
  return device::Collective::kBarrier;
}

const char* comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::kAllReduce:
      return "all_reduce";
    case CommOp::kReduceScatter:
      return "reduce_scatter";
    case CommOp::kAllGather:
      return "all_gather";
    case CommOp::kBroadcast:
      return "broadcast";
    case CommOp::kSend:
      return "send";
    case CommOp::kRecv:
      return "recv";
    case CommOp::kSendRecv:
      return "send_recv";
    case CommOp::kBarrier:
      return "barrier";
  }
  return "?";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "?";
}

int scalar_bytes(ScalarType t) {
  switch (t) {
    case ScalarType::kF32:
      return 4;
    case ScalarType::kF64:
      return 8;
    case ScalarType::kI32:
      return 4;
    case ScalarType::kI64:
      return 8;
    case ScalarType::kU8:
      return 1;
  }
  return 1;
}

const char* scalar_type_name(ScalarType t) {
  switch (t) {
    case ScalarType::kF32:
      return "float32";
    case ScalarType::kF64:
      return "float64";
    case ScalarType::kI32:
      return "int32";
    case ScalarType::kI64:
      return "int64";
    case ScalarType::kU8:
      return "uint8";
  }
  return "?";
}

// --- argument checks: a bad call is a bug in the caller (exit code 1) -------

void Comm::check_count(const char* what, int64_t n, const void* buffer) const {
  if (n < 0) throw Error(ExitCode::kInternal, fmt::format("comm '{}': {} with negative count {}", name_, what, n));
  if (n > 0 && buffer == nullptr && moves_data()) {
    throw Error(ExitCode::kInternal, fmt::format("comm '{}': {} of {} elements with a null buffer", name_, what, n));
  }
}

void Comm::check_peer(const char* what, const char* role, int peer, bool allow_self) const {
  if (peer < 0 || peer >= size()) {
    throw Error(ExitCode::kInternal,
                fmt::format("comm '{}': {} {} {} is outside the group of {} ranks", name_, what, role, peer, size()));
  }
  if (!allow_self && peer == rank()) {
    throw Error(ExitCode::kInternal,
                fmt::format("comm '{}': rank {} {} to itself would block forever", name_, rank(), what));
  }
}

void Comm::check_tag(const char* what, int tag) const {
  if (tag < 0 || tag > kMaxTag) {
    throw Error(ExitCode::kInternal, fmt::format("comm '{}': {} tag {} is outside [0, {}]", name_, what, tag, kMaxTag));
  }
}

void Comm::report(CommEvent& e, double start_seconds) const {
  e.seconds = now_seconds() - start_seconds;
  publish(e);
}

void Comm::publish(CommEvent& e) const {
  if (!observer_) return;
  e.group = name_;
  e.group_size = size();
  e.rank = rank();
  observer_(e);
}

// --- front ends: check, time, run, report ----------------------------------

void Comm::run_all_reduce(void* data, int64_t n, ScalarType t, ReduceOp op, Wire wire) {
  check_count("all_reduce", n, data);
  const double t0 = now_seconds();
  do_all_reduce(data, n, t, op);
  CommEvent e{.op = CommOp::kAllReduce, .type = t, .elements = n, .bytes = wire_bytes(n, t, wire)};
  report(e, t0);
}

void Comm::run_reduce_scatter(const void* in, void* out, int64_t chunk, ScalarType t, ReduceOp op, Wire wire) {
  check_count("reduce_scatter", chunk, in);
  check_count("reduce_scatter", chunk, out);
  const double t0 = now_seconds();
  do_reduce_scatter(in, out, chunk, t, op);
  const int64_t n = chunk * size();
  CommEvent e{.op = CommOp::kReduceScatter, .type = t, .elements = n, .bytes = wire_bytes(n, t, wire)};
  report(e, t0);
}

void Comm::run_all_gather(const void* in, void* out, int64_t chunk, ScalarType t, Wire wire) {
  check_count("all_gather", chunk, in);
  check_count("all_gather", chunk, out);
  const double t0 = now_seconds();
  do_all_gather(in, out, chunk, t);
  const int64_t n = chunk * size();
  CommEvent e{.op = CommOp::kAllGather, .type = t, .elements = n, .bytes = wire_bytes(n, t, wire)};
  report(e, t0);
}

void Comm::run_broadcast(void* data, int64_t n, ScalarType t, int root, Wire wire) {
  check_count("broadcast", n, data);
  check_peer("broadcast", "root", root, /*allow_self=*/true);
  const double t0 = now_seconds();
  do_broadcast(data, n, t, root);
  CommEvent e{.op = CommOp::kBroadcast, .type = t, .elements = n, .bytes = wire_bytes(n, t, wire), .peer = root};
  report(e, t0);
}

void Comm::run_send(const void* data, int64_t n, ScalarType t, int peer, int tag, Wire wire) {
  check_count("send", n, data);
  check_peer("send", "peer", peer, /*allow_self=*/false);
  check_tag("send", tag);
  const double t0 = now_seconds();
  do_send(data, n, t, peer, tag);
  CommEvent e{.op = CommOp::kSend, .type = t, .elements = n, .bytes = wire_bytes(n, t, wire), .peer = peer};
  report(e, t0);
}

void Comm::run_recv(void* data, int64_t n, ScalarType t, int peer, int tag, Wire wire) {
  check_count("recv", n, data);
  check_peer("recv", "peer", peer, /*allow_self=*/false);
  check_tag("recv", tag);
  const double t0 = now_seconds();
  do_recv(data, n, t, peer, tag);
  CommEvent e{.op = CommOp::kRecv, .type = t, .elements = n, .bytes = wire_bytes(n, t, wire), .peer = peer};
  report(e, t0);
}

SendRequest Comm::run_isend(const void* data, int64_t n, ScalarType t, int peer, int tag, Wire wire) {
  check_count("isend", n, data);
  check_peer("isend", "peer", peer, /*allow_self=*/false);
  check_tag("isend", tag);
  const double t0 = now_seconds();
  SendRequest request(do_isend(data, n, t, peer, tag));
  CommEvent e{.op = CommOp::kSend,
              .type = t,
              .elements = n,
              .bytes = wire_bytes(n, t, wire),
              .peer = peer,
              .nonblocking = true};
  report(e, t0);
  return request;
}

void Comm::run_send_recv(const void* send_data, int64_t send_n, int dest, void* recv_data, int64_t recv_n, int src,
                         ScalarType t, int tag, Wire wire) {
  check_count("send_recv", send_n, send_data);
  check_count("send_recv", recv_n, recv_data);
  check_peer("send_recv", "destination", dest, /*allow_self=*/true);
  check_peer("send_recv", "source", src, /*allow_self=*/true);
  check_tag("send_recv", tag);
  const double t0 = now_seconds();
  do_send_recv(send_data, send_n, dest, recv_data, recv_n, src, t, tag);
  CommEvent e{.op = CommOp::kSendRecv,
              .type = t,
              .elements = send_n,
              .bytes = wire_bytes(send_n, t, wire),
              .recv_bytes = wire_bytes(recv_n, t, wire),
              .peer = dest,
              .recv_peer = src};
  report(e, t0);
}

CollectiveRequest Comm::run_start_all_reduce(void* data, int64_t n, ScalarType t, ReduceOp op, Wire wire) {
  check_count("start_all_reduce", n, data);
  const double t0 = now_seconds();
  std::unique_ptr<detail::PendingCollective> pending = do_start_all_reduce(data, n, t, op);
  CommEvent e{.op = CommOp::kAllReduce, .type = t, .elements = n, .bytes = wire_bytes(n, t, wire), .nonblocking = true};
  e.seconds = now_seconds() - t0;
  return CollectiveRequest(*this, std::move(pending), e);
}

CollectiveRequest Comm::run_start_reduce_scatter(const void* in, void* out, int64_t chunk, ScalarType t, ReduceOp op,
                                                 Wire wire) {
  check_count("start_reduce_scatter", chunk, in);
  check_count("start_reduce_scatter", chunk, out);
  const double t0 = now_seconds();
  std::unique_ptr<detail::PendingCollective> pending = do_start_reduce_scatter(in, out, chunk, t, op);
  const int64_t n = chunk * size();
  CommEvent e{
      .op = CommOp::kReduceScatter, .type = t, .elements = n, .bytes = wire_bytes(n, t, wire), .nonblocking = true};
  e.seconds = now_seconds() - t0;
  return CollectiveRequest(*this, std::move(pending), e);
}

CollectiveRequest Comm::run_start_all_gather(const void* in, void* out, int64_t chunk, ScalarType t, Wire wire) {
  check_count("start_all_gather", chunk, in);
  check_count("start_all_gather", chunk, out);
  const double t0 = now_seconds();
  std::unique_ptr<detail::PendingCollective> pending = do_start_all_gather(in, out, chunk, t);
  const int64_t n = chunk * size();
  CommEvent e{.op = CommOp::kAllGather, .type = t, .elements = n, .bytes = wire_bytes(n, t, wire), .nonblocking = true};
  e.seconds = now_seconds() - t0;
  return CollectiveRequest(*this, std::move(pending), e);
}

void Comm::barrier() {
  const double t0 = now_seconds();
  do_barrier();
  CommEvent e{.op = CommOp::kBarrier};
  report(e, t0);
}

// --- CollectiveRequest -------------------------------------------------------

void CollectiveRequest::take(CollectiveRequest& other) noexcept {
  comm_ = std::exchange(other.comm_, nullptr);
  pending_ = std::move(other.pending_);
  event_ = other.event_;
}

CollectiveRequest& CollectiveRequest::operator=(CollectiveRequest&& other) {
  if (this != &other) {
    wait();
    take(other);
  }
  return *this;
}

CollectiveRequest::~CollectiveRequest() {
  try {
    wait();
  } catch (...) {  // unwinding after an error that is reported elsewhere
  }
}

bool CollectiveRequest::done() {
  if (comm_ == nullptr) return true;
  const double t0 = now_seconds();
  const bool complete = pending_ == nullptr || pending_->test();
  event_.seconds += now_seconds() - t0;
  if (complete) this->complete();
  return complete;
}

void CollectiveRequest::wait() {
  if (comm_ == nullptr) return;
  const double t0 = now_seconds();
  if (pending_) pending_->wait();
  event_.seconds += now_seconds() - t0;
  complete();
}

void CollectiveRequest::complete() {
  pending_.reset();
  const Comm* comm = std::exchange(comm_, nullptr);
  comm->publish(event_);
}

}  // namespace mtrain::parallel
