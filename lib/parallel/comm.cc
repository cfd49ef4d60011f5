#include "parallel/comm.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "common/errors.h"
#include "device/cost_model.h"
#include "profiler/kernel_region.h"

namespace mtrain::parallel {
namespace {

// A collective's host time (CommEvent::seconds); a shape-only step moves
// nothing, and its thousands of collectives read no clock.
double now_seconds() {
  if (profiler::shape_only()) return 0.0;
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
    case CommOp::kAllToAll:
      return device::Collective::kAllToAll;
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
    case CommOp::kAllToAll:
      return "all_to_all";
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

std::pair<int64_t, int64_t> Comm::check_all_to_all_layout(const void* in, std::span<const int64_t> send_counts,
                                                          std::span<const int64_t> send_displs, const void* out,
                                                          std::span<const int64_t> recv_counts,
                                                          std::span<const int64_t> recv_displs, ScalarType t) const {
  const auto p = static_cast<size_t>(size());
  if (send_counts.size() != p || send_displs.size() != p || recv_counts.size() != p || recv_displs.size() != p) {
    throw Error(ExitCode::kInternal,
                fmt::format("comm '{}': all_to_all_v needs {} counts and displacements per side, got {}/{} to send "
                            "and {}/{} to receive",
                            name_, p, send_counts.size(), send_displs.size(), recv_counts.size(), recv_displs.size()));
  }
  // Extent of each side in elements, and the receive blocks to test for overlap.
  auto side = [&](const char* what, std::span<const int64_t> counts, std::span<const int64_t> displs,
                  std::vector<std::pair<int64_t, int64_t>>* blocks) {
    int64_t total = 0, begin = INT64_MAX, end = 0;
    for (size_t k = 0; k < p; ++k) {
      if (counts[k] < 0 || displs[k] < 0) {
        throw Error(ExitCode::kInternal, fmt::format("comm '{}': all_to_all_v {} block for rank {} has count {} at "
                                                     "displacement {}",
                                                     name_, what, k, counts[k], displs[k]));
      }
      if (counts[k] == 0) continue;
      total += counts[k], begin = std::min(begin, displs[k]), end = std::max(end, displs[k] + counts[k]);
      if (blocks) blocks->emplace_back(displs[k], counts[k]);
    }
    return std::tuple{total, begin, end};
  };
  std::vector<std::pair<int64_t, int64_t>> blocks;
  const auto [sent, send_begin, send_end] = side("send", send_counts, send_displs, nullptr);
  const auto [received, recv_begin, recv_end] = side("receive", recv_counts, recv_displs, &blocks);
  check_count("all_to_all_v", sent, in);
  check_count("all_to_all_v", received, out);
  std::sort(blocks.begin(), blocks.end());
  for (size_t i = 1; i < blocks.size(); ++i) {
    if (blocks[i - 1].first + blocks[i - 1].second > blocks[i].first) {
      throw Error(ExitCode::kInternal,
                  fmt::format("comm '{}': all_to_all_v receive blocks overlap at element {}", name_, blocks[i].first));
    }
  }
  const int64_t esize = scalar_bytes(t);
  const auto* in_lo = static_cast<const std::byte*>(in) + send_begin * esize;
  const auto* out_lo = static_cast<const std::byte*>(out) + recv_begin * esize;
  if (moves_data() && sent > 0 && received > 0 && in_lo < static_cast<const std::byte*>(out) + recv_end * esize &&
      out_lo < static_cast<const std::byte*>(in) + send_end * esize) {
    throw Error(ExitCode::kInternal, fmt::format("comm '{}': all_to_all_v input and output overlap", name_));
  }
  if (send_counts[rank()] != recv_counts[rank()]) {
    throw Error(ExitCode::kInternal, fmt::format("comm '{}': rank {} all_to_all_v sends {} elements to itself but "
                                                 "expects {}",
                                                 name_, rank(), send_counts[rank()], recv_counts[rank()]));
  }
  return {sent, received};
}

void Comm::run_all_to_all_v(const void* in, std::span<const int64_t> send_counts, std::span<const int64_t> send_displs,
                            void* out, std::span<const int64_t> recv_counts, std::span<const int64_t> recv_displs,
                            ScalarType t, Wire wire) {
  const auto [sent, received] = check_all_to_all_layout(in, send_counts, send_displs, out, recv_counts, recv_displs, t);
  const double t0 = now_seconds();
  do_all_to_all_v(in, send_counts.data(), send_displs.data(), out, recv_counts.data(), recv_displs.data(), t);
  CommEvent e{.op = CommOp::kAllToAll,
              .type = t,
              .elements = sent,
              .bytes = wire_bytes(sent, t, wire),
              .recv_bytes = wire_bytes(received, t, wire)};
  report(e, t0);
}

void Comm::run_all_to_all(const void* in, void* out, int64_t chunk, ScalarType t, Wire wire) {
  check_count("all_to_all", chunk, in);
  std::vector<int64_t> counts(size(), chunk), displs(size());
  for (int k = 0; k < size(); ++k) displs[k] = k * chunk;
  run_all_to_all_v(in, counts, displs, out, counts, displs, t, wire);
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
