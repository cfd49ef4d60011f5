// Comm: the collectives and point-to-point transfers of one process group
// (Megatron's torch.distributed calls on one group), independent of how the
// ranks are realised: MpiComm (one MPI rank per simulated NPU), SimComm
// (ranks as threads of one process), SelfComm (a group of one) and MetaComm
// (shape-only dry runs: no data moves, every call is still reported).
//
// Semantics every implementation follows (tests/parallel/comm_conformance.h):
// - Reductions of floating-point data are deterministic: element i of the
//   result is ((x_0[i] + x_1[i]) + x_2[i]) + ... in group-rank order, computed
//   once and copied to every rank, so all ranks hold bit-identical results and
//   a rerun (or another Comm implementation) gives the same bits. kMax/kMin
//   propagate NaN. Integer reductions are exact.
// - All ranks of the group call the same collectives in the same order with
//   the same counts; a Comm is used by one thread at a time.
// - send/recv are blocking and may be synchronous (like MPI_Ssend): a program
//   must not rely on buffering. Messages between a pair of ranks with the same
//   tag arrive in the order they were sent. send_recv posts both sides at once
//   (use it for pipeline exchanges that would otherwise deadlock).
// - isend copies the message into a buffer the returned SendRequest owns and
//   returns at once; it matches recv like send (same FIFO per pair and tag).
//   Its request completes once the message is delivered (synchronous
//   SimComm: received) or handed to the transport (MPI); wait for it.
// - start_all_reduce / start_reduce_scatter / start_all_gather are the
//   non-blocking forms of those collectives, with the same bits as the
//   blocking calls. Every rank starts
//   the same collectives (blocking or not) in the same order; requests may be
//   waited in any order, on each rank independently, with blocking calls in
//   between. The buffers belong to the collective until its request completes.
//   Progress is made whenever the rank calls into this Comm (MpiComm folds its
//   share and launches the second half then), so a rank must not block
//   elsewhere on something that needs another rank's request to complete.
// - all_to_all_v is MPI_Alltoallv: a pure exchange, bit-exact. The counts
//   must agree pairwise (what rank r sends to p is what p expects from r);
//   SimComm checks that, MPI only notices a message longer than expected.
// - Every call is reported to the observer (if set) after it completes, with
//   its payload bytes and wall time, for the profiler and the cost model.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "tensor/tensor.h"

namespace mtrain::device {
enum class Collective;  // device/cost_model.h
}

namespace mtrain::parallel {

enum class CommOp { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kSend, kRecv, kSendRecv, kBarrier, kAllToAll };
const char* comm_op_name(CommOp op);  // "all_reduce", ...
// The pattern the device cost model prices an op with (send/recv: point-to-point).
device::Collective cost_collective(CommOp op);

enum class ReduceOp { kSum, kMax, kMin };
const char* reduce_op_name(ReduceOp op);

enum class ScalarType { kF32, kF64, kI32, kI64, kU8 };
int scalar_bytes(ScalarType t);
const char* scalar_type_name(ScalarType t);

template <class T>
concept CommScalar = std::same_as<T, float> || std::same_as<T, double> || std::same_as<T, int32_t> ||
    std::same_as<T, int64_t> || std::same_as<T, uint8_t>;

template <CommScalar T>
constexpr ScalarType scalar_type_of() {
  if constexpr (std::same_as<T, float>) return ScalarType::kF32;
  if constexpr (std::same_as<T, double>) return ScalarType::kF64;
  if constexpr (std::same_as<T, int32_t>) return ScalarType::kI32;
  if constexpr (std::same_as<T, int64_t>) return ScalarType::kI64;
  if constexpr (std::same_as<T, uint8_t>) return ScalarType::kU8;
}

// How a call is accounted: the element size the buffer has on the NPU. Host
// storage is fp32, but a bf16 gradient bucket moves 2 bytes per element on
// the device: pass Wire::of(DType::kBF16). Default: the host element size.
struct Wire {
  int element_bytes = 0;  // 0 = sizeof(T)
  static Wire of(DType t) { return Wire{dtype_bytes(t)}; }
};

// One completed call, as seen by the calling rank.
struct CommEvent {
  CommOp op = CommOp::kBarrier;
  std::string_view group{};  // the communicator's name ("tp", "dp", ...); valid during the callback
  int group_size = 1;
  int rank = 0;  // the caller's rank in the group
  ScalarType type = ScalarType::kF32;
  // Payload in elements and in wire bytes (elements x Wire::element_bytes):
  //   all_reduce, broadcast: the buffer; reduce_scatter, all_gather: the full
  //   (unsharded) buffer = group_size x chunk; send: the message sent; recv:
  //   the message received; send_recv: the message sent (recv_bytes: received);
  //   all_to_all(_v): everything this rank sends, its own block included
  //   (recv_bytes: everything it receives, its own block included).
  int64_t elements = 0;
  int64_t bytes = 0;
  int64_t recv_bytes = 0;  // send_recv, all_to_all only
  int peer = -1;           // send: destination; recv: source; send_recv: destination; broadcast: root
  int recv_peer = -1;      // send_recv: source
  double seconds = 0;      // wall time of the call on this rank (includes waiting for peers)
  // isend: reported as a kSend when posted; `seconds` is the time to post it
  // (copy + enqueue), the transfer itself overlaps what the rank does next.
  // start_all_reduce / start_reduce_scatter: reported once, when the request
  // completes (in wait() or done()); `seconds` is the time spent inside the
  // request's calls (start, done, wait), i.e. the part not overlapped.
  bool nonblocking = false;
};
using CommObserver = std::function<void(const CommEvent&)>;

class Comm;

namespace detail {
// One implementation's state of a non-blocking send (Comm::isend).
class PendingSend {
 public:
  virtual ~PendingSend() = default;  // unfinished: abandoned (still delivered), never cancelled
  virtual bool test() = 0;           // true once the send has completed; never blocks
  virtual void wait() = 0;           // blocks until the send has completed
};

// One implementation's state of a non-blocking collective. The front end
// (CollectiveRequest) waits before destroying it; a destructor that still
// finds it unfinished (after an error) must not free memory the transport
// may still write.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  virtual bool test() = 0;  // makes progress without blocking; true once the result is in the caller's buffer
  virtual void wait() = 0;  // blocks until the result is in the caller's buffer
};
}  // namespace detail

// A non-blocking send in flight (Comm::isend). Move-only; a default one is
// complete. Must not outlive its Comm. Destroying a request that has not
// completed abandons it: the message is still delivered when the peer
// receives it (the Comm keeps its copy), but errors are no longer reported.
// That is for unwinding after an error; normal code waits.
class SendRequest {
 public:
  SendRequest() = default;
  explicit SendRequest(std::unique_ptr<detail::PendingSend> pending) : pending_(std::move(pending)) {}
  // True once complete (completes it if that needs no waiting).
  bool done() {
    if (pending_ && pending_->test()) pending_.reset();
    return pending_ == nullptr;
  }
  // Blocks until complete; DistributedError if the transfer failed. Idempotent.
  void wait() {
    if (!pending_) return;
    pending_->wait();
    pending_.reset();
  }

 private:
  std::unique_ptr<detail::PendingSend> pending_;
};

// A non-blocking collective in flight (Comm::start_all_reduce, ...).
// Move-only; a default one is complete. Must not outlive its Comm. The
// collective is reported to the Comm's observer once, when it completes.
// Destroying a request that has not completed waits for it (errors are
// swallowed then: wait explicitly to see them).
class CollectiveRequest {
 public:
  CollectiveRequest() = default;
  CollectiveRequest(CollectiveRequest&& other) noexcept { take(other); }
  // Waits for the request held so far, then takes `other`'s.
  CollectiveRequest& operator=(CollectiveRequest&& other);
  ~CollectiveRequest();
  // True once complete (completes it, and makes progress, without blocking).
  bool done();
  // Blocks until complete; DistributedError if the collective failed. Idempotent.
  void wait();

 private:
  friend class Comm;
  CollectiveRequest(const Comm& comm, std::unique_ptr<detail::PendingCollective> pending, const CommEvent& event)
      : comm_(&comm), pending_(std::move(pending)), event_(event) {}
  void take(CollectiveRequest& other) noexcept;
  void complete();  // reports once

  const Comm* comm_ = nullptr;  // null once complete and reported
  std::unique_ptr<detail::PendingCollective> pending_;
  CommEvent event_{};  // seconds accumulates the time spent in start, done and wait
};

class Comm {
 public:
  explicit Comm(std::string name) : name_(std::move(name)) {}
  virtual ~Comm() = default;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  const std::string& name() const { return name_; }
  virtual int rank() const = 0;
  virtual int size() const = 0;
  void set_observer(CommObserver observer) { observer_ = std::move(observer); }

  // In place: data (n) on every rank becomes the reduction over the group.
  template <CommScalar T>
  void all_reduce(T* data, int64_t n, ReduceOp op = ReduceOp::kSum, Wire wire = {}) {
    run_all_reduce(data, n, scalar_type_of<T>(), op, wire);
  }
  void all_reduce_sum(float* data, int64_t n, Wire wire = {}) { all_reduce(data, n, ReduceOp::kSum, wire); }
  void all_reduce_sum(double* data, int64_t n, Wire wire = {}) { all_reduce(data, n, ReduceOp::kSum, wire); }
  // One value, e.g. a non-finite flag: all_reduce_value(int32_t{found_inf}, ReduceOp::kMax).
  template <CommScalar T>
  T all_reduce_value(T value, ReduceOp op) {
    all_reduce(&value, 1, op);
    return value;
  }

  // Non-blocking all_reduce: same result bits; `data` must not be touched
  // until the request completes.
  template <CommScalar T>
  [[nodiscard]] CollectiveRequest start_all_reduce(T* data, int64_t n, ReduceOp op = ReduceOp::kSum, Wire wire = {}) {
    return run_start_all_reduce(data, n, scalar_type_of<T>(), op, wire);
  }
  [[nodiscard]] CollectiveRequest start_all_reduce_sum(float* data, int64_t n, Wire wire = {}) {
    return start_all_reduce(data, n, ReduceOp::kSum, wire);
  }

  // in (size * chunk), out (chunk): out = reduction of every rank's chunk
  // number rank(). out may alias in + rank() * chunk (Megatron's shard view).
  template <CommScalar T>
  void reduce_scatter(const T* in, T* out, int64_t chunk, ReduceOp op = ReduceOp::kSum, Wire wire = {}) {
    run_reduce_scatter(in, out, chunk, scalar_type_of<T>(), op, wire);
  }
  // Non-blocking reduce_scatter (same aliasing rule); neither buffer may be
  // touched until the request completes.
  template <CommScalar T>
  [[nodiscard]] CollectiveRequest start_reduce_scatter(const T* in, T* out, int64_t chunk, ReduceOp op = ReduceOp::kSum,
                                                       Wire wire = {}) {
    return run_start_reduce_scatter(in, out, chunk, scalar_type_of<T>(), op, wire);
  }
  [[nodiscard]] CollectiveRequest start_reduce_scatter_sum(const float* in, float* out, int64_t chunk, Wire wire = {}) {
    return start_reduce_scatter(in, out, chunk, ReduceOp::kSum, wire);
  }
  // in (chunk), out (size * chunk): out[r * chunk ...] = rank r's in.
  // in may alias out + rank() * chunk.
  template <CommScalar T>
  void all_gather(const T* in, T* out, int64_t chunk, Wire wire = {}) {
    run_all_gather(in, out, chunk, scalar_type_of<T>(), wire);
  }
  // Non-blocking all_gather (same aliasing rule): `out` must not be read,
  // nor `in` written, until the request completes.
  template <CommScalar T>
  [[nodiscard]] CollectiveRequest start_all_gather(const T* in, T* out, int64_t chunk, Wire wire = {}) {
    return run_start_all_gather(in, out, chunk, scalar_type_of<T>(), wire);
  }
  // data (n) of group rank `root` is copied to every rank.
  template <CommScalar T>
  void broadcast(T* data, int64_t n, int root, Wire wire = {}) {
    run_broadcast(data, n, scalar_type_of<T>(), root, wire);
  }

  // Point to point; peers are group ranks, tags in [0, kMaxTag].
  static constexpr int kMaxTag = 32767;
  template <CommScalar T>
  void send(const T* data, int64_t n, int peer, int tag, Wire wire = {}) {
    run_send(data, n, scalar_type_of<T>(), peer, tag, wire);
  }
  // Receives exactly n elements; a message of another size is an error.
  template <CommScalar T>
  void recv(T* data, int64_t n, int peer, int tag, Wire wire = {}) {
    run_recv(data, n, scalar_type_of<T>(), peer, tag, wire);
  }
  // Non-blocking send: copies data (n) and returns; `data` may be reused at
  // once. Received by recv (or send_recv) like a send with the same tag.
  template <CommScalar T>
  [[nodiscard]] SendRequest isend(const T* data, int64_t n, int peer, int tag, Wire wire = {}) {
    return run_isend(data, n, scalar_type_of<T>(), peer, tag, wire);
  }
  // Sends to `dest` and receives from `src` at the same time (same tag).
  template <CommScalar T>
  void send_recv(const T* send_data, int64_t send_n, int dest, T* recv_data, int64_t recv_n, int src, int tag,
                 Wire wire = {}) {
    run_send_recv(send_data, send_n, dest, recv_data, recv_n, src, scalar_type_of<T>(), tag, wire);
  }

  // Personalised exchange (MPI_Alltoallv), e.g. MoE token dispatch: this rank
  // sends send_counts[p] elements from in + send_displs[p] to group rank p and
  // receives recv_counts[p] elements from p into out + recv_displs[p]. One
  // entry per group rank, in elements; recv_counts[p] here must equal
  // send_counts[rank()] on rank p (exchange the counts first, e.g. with an
  // all_to_all of int64). `in` and `out` must not overlap, nor the receive
  // blocks each other.
  template <CommScalar T>
  void all_to_all_v(const T* in, std::span<const int64_t> send_counts, std::span<const int64_t> send_displs, T* out,
                    std::span<const int64_t> recv_counts, std::span<const int64_t> recv_displs, Wire wire = {}) {
    run_all_to_all_v(in, send_counts, send_displs, out, recv_counts, recv_displs, scalar_type_of<T>(), wire);
  }
  // Equal split (Ulysses CP): in (size * chunk), out (size * chunk);
  // out[p * chunk ...] = rank p's in[rank() * chunk ...].
  template <CommScalar T>
  void all_to_all(const T* in, T* out, int64_t chunk, Wire wire = {}) {
    run_all_to_all(in, out, chunk, scalar_type_of<T>(), wire);
  }

  void barrier();

  // False for MetaComm (shape-only): buffers may be null and are never touched.
  virtual bool moves_data() const { return true; }

 protected:
  // Implementations see validated arguments (counts >= 0, ranks in range, a
  // non-null buffer whenever moves_data() and the count is positive).
  virtual void do_all_reduce(void* data, int64_t n, ScalarType t, ReduceOp op) = 0;
  virtual void do_reduce_scatter(const void* in, void* out, int64_t chunk, ScalarType t, ReduceOp op) = 0;
  virtual void do_all_gather(const void* in, void* out, int64_t chunk, ScalarType t) = 0;
  virtual void do_broadcast(void* data, int64_t n, ScalarType t, int root) = 0;
  virtual void do_send(const void* data, int64_t n, ScalarType t, int peer, int tag) = 0;
  virtual void do_recv(void* data, int64_t n, ScalarType t, int peer, int tag) = 0;
  virtual void do_send_recv(const void* send_data, int64_t send_n, int dest, void* recv_data, int64_t recv_n, int src,
                            ScalarType t, int tag) = 0;
  virtual void do_barrier() = 0;
  // Arrays of size() entries, in elements; the blocks are validated (counts
  // and displacements >= 0, in and out disjoint, receive blocks disjoint, the
  // block to itself the same size both ways).
  virtual void do_all_to_all_v(const void* in, const int64_t* send_counts, const int64_t* send_displs, void* out,
                               const int64_t* recv_counts, const int64_t* recv_displs, ScalarType t) = 0;
  // Copies the message and posts it; nullptr when it is already complete.
  virtual std::unique_ptr<detail::PendingSend> do_isend(const void* data, int64_t n, ScalarType t, int peer,
                                                        int tag) = 0;
  // Start a collective; nullptr when it is already complete.
  virtual std::unique_ptr<detail::PendingCollective> do_start_all_reduce(void* data, int64_t n, ScalarType t,
                                                                         ReduceOp op) = 0;
  virtual std::unique_ptr<detail::PendingCollective> do_start_reduce_scatter(const void* in, void* out, int64_t chunk,
                                                                             ScalarType t, ReduceOp op) = 0;
  virtual std::unique_ptr<detail::PendingCollective> do_start_all_gather(const void* in, void* out, int64_t chunk,
                                                                         ScalarType t) = 0;

 private:
  friend class CollectiveRequest;
  void run_all_reduce(void* data, int64_t n, ScalarType t, ReduceOp op, Wire wire);
  void run_reduce_scatter(const void* in, void* out, int64_t chunk, ScalarType t, ReduceOp op, Wire wire);
  void run_all_gather(const void* in, void* out, int64_t chunk, ScalarType t, Wire wire);
  void run_broadcast(void* data, int64_t n, ScalarType t, int root, Wire wire);
  void run_send(const void* data, int64_t n, ScalarType t, int peer, int tag, Wire wire);
  void run_recv(void* data, int64_t n, ScalarType t, int peer, int tag, Wire wire);
  SendRequest run_isend(const void* data, int64_t n, ScalarType t, int peer, int tag, Wire wire);
  CollectiveRequest run_start_all_reduce(void* data, int64_t n, ScalarType t, ReduceOp op, Wire wire);
  CollectiveRequest run_start_reduce_scatter(const void* in, void* out, int64_t chunk, ScalarType t, ReduceOp op,
                                             Wire wire);
  CollectiveRequest run_start_all_gather(const void* in, void* out, int64_t chunk, ScalarType t, Wire wire);
  void run_send_recv(const void* send_data, int64_t send_n, int dest, void* recv_data, int64_t recv_n, int src,
                     ScalarType t, int tag, Wire wire);
  void run_all_to_all_v(const void* in, std::span<const int64_t> send_counts, std::span<const int64_t> send_displs,
                        void* out, std::span<const int64_t> recv_counts, std::span<const int64_t> recv_displs,
                        ScalarType t, Wire wire);
  void run_all_to_all(const void* in, void* out, int64_t chunk, ScalarType t, Wire wire);
  // Checks an all_to_all_v's layout (see do_all_to_all_v); returns the
  // elements sent and received.
  std::pair<int64_t, int64_t> check_all_to_all_layout(const void* in, std::span<const int64_t> send_counts,
                                                      std::span<const int64_t> send_displs, const void* out,
                                                      std::span<const int64_t> recv_counts,
                                                      std::span<const int64_t> recv_displs, ScalarType t) const;

  void check_count(const char* what, int64_t n, const void* buffer) const;
  void check_peer(const char* what, const char* role, int peer, bool allow_self) const;
  void check_tag(const char* what, int tag) const;
  void report(CommEvent& event, double start_seconds) const;
  void publish(CommEvent& event) const;  // fills the group fields and calls the observer

  std::string name_;
  CommObserver observer_;
};

}  // namespace mtrain::parallel
