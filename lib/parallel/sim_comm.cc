#include "parallel/sim_comm.h"

#include <fmt/format.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <list>
#include <memory>

#include "common/errors.h"
#include "parallel/reduce_kernels.h"
#include "parallel/sim_comm_internal.h"

namespace mtrain::parallel {

namespace {

using detail::CollectiveSlot;
using detail::Message;
using detail::Post;
using detail::SimAbortedError;
using detail::SimGroup;

std::string post_str(const Post& p) {
  std::string s =
      fmt::format("{}{}({} x {}", p.nonblocking ? "start_" : "", comm_op_name(p.op), scalar_type_name(p.type), p.n);
  if (p.op == CommOp::kAllReduce || p.op == CommOp::kReduceScatter) s += fmt::format(", {}", reduce_op_name(p.reduce));
  if (p.op == CommOp::kBroadcast) s += fmt::format(", root {}", p.root);
  return s + ")";
}

class SimComm;

// A synchronous-mode isend: complete once the receiver has taken the copy.
class SimPendingSend final : public detail::PendingSend {
 public:
  SimPendingSend(SimComm& comm, std::list<Message>::iterator msg) : comm_(&comm), msg_(msg) {}
  ~SimPendingSend() override;
  bool test() override;
  void wait() override;

 private:
  SimComm* comm_;
  std::list<Message>::iterator msg_;
  bool done_ = false;
};

// A non-blocking collective: its input is deposited in the slot; it
// completes once every rank has deposited, by folding this rank's result.
class SimPendingCollective final : public detail::PendingCollective {
 public:
  SimPendingCollective(SimComm& comm, std::shared_ptr<CollectiveSlot> slot, const Post& post, void* out)
      : comm_(&comm), slot_(std::move(slot)), post_(post), out_(out) {}
  bool test() override;
  void wait() override;

 private:
  void finish(std::unique_lock<std::mutex>& lk);
  void fold(int size);  // a reduction's result from the deposits

  SimComm* comm_;
  std::shared_ptr<CollectiveSlot> slot_;
  Post post_;
  void* out_;  // all_reduce: the data; reduce_scatter: the output chunk; all_gather: the output
  bool done_ = false;
};

class SimComm final : public Comm {
  friend class SimPendingSend;
  friend class SimPendingCollective;

 public:
  SimComm(SimWorld& world, std::shared_ptr<SimGroup> group, int rank)
      : Comm(group->name), world_(&world), group_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(group_->members.size()); }

 protected:
  void do_all_reduce(void* data, int64_t n, ScalarType t, ReduceOp op) override {
    const size_t bytes = static_cast<size_t>(n) * scalar_bytes(t);
    arrive(Post{CommOp::kAllReduce, t, op, n, -1, data});
    // Every rank folds the full buffer in rank order: the same bits everywhere.
    scratch_.resize(bytes);
    inputs_.clear();
    for (const Post& p : group_->posts) inputs_.push_back(p.in);
    detail::reduce_in_rank_order(scratch_.data(), inputs_.data(), size(), n, t, op);
    arrive(nullptr);  // nobody overwrites an input another rank still reads
    if (bytes) std::memcpy(data, scratch_.data(), bytes);
  }

  void do_reduce_scatter(const void* in, void* out, int64_t chunk, ScalarType t, ReduceOp op) override {
    const size_t bytes = static_cast<size_t>(chunk) * scalar_bytes(t);
    arrive(Post{CommOp::kReduceScatter, t, op, chunk, -1, in});
    scratch_.resize(bytes);
    inputs_.clear();
    for (const Post& p : group_->posts) inputs_.push_back(static_cast<const std::byte*>(p.in) + rank_ * bytes);
    detail::reduce_in_rank_order(scratch_.data(), inputs_.data(), size(), chunk, t, op);
    arrive(nullptr);
    if (bytes) std::memcpy(out, scratch_.data(), bytes);
  }

  void do_all_gather(const void* in, void* out, int64_t chunk, ScalarType t) override {
    const size_t bytes = static_cast<size_t>(chunk) * scalar_bytes(t);
    arrive(Post{CommOp::kAllGather, t, ReduceOp::kSum, chunk, -1, in});
    auto* dst = static_cast<std::byte*>(out);
    for (int k = 0; k < size(); ++k) {
      const void* src = group_->posts[k].in;
      if (bytes && src != dst + k * bytes) std::memcpy(dst + k * bytes, src, bytes);
    }
    arrive(nullptr);
  }

  void do_broadcast(void* data, int64_t n, ScalarType t, int root) override {
    arrive(Post{CommOp::kBroadcast, t, ReduceOp::kSum, n, root, data});
    if (rank_ != root && n) std::memcpy(data, group_->posts[root].in, static_cast<size_t>(n) * scalar_bytes(t));
    arrive(nullptr);
  }

  // Every rank copies its blocks straight from the senders' buffers.
  void do_all_to_all_v(const void* in, const int64_t* send_counts, const int64_t* send_displs, void* out,
                       const int64_t* recv_counts, const int64_t* recv_displs, ScalarType t) override {
    Post post{CommOp::kAllToAll, t, ReduceOp::kSum, 0, -1, in};
    for (int k = 0; k < size(); ++k) post.n += send_counts[k];
    post.send_counts = send_counts, post.send_displs = send_displs, post.recv_counts = recv_counts;
    arrive(post);
    const size_t esize = scalar_bytes(t);
    for (int k = 0; k < size(); ++k) {
      const Post& from = group_->posts[k];
      const int64_t n = from.send_counts[rank_];
      if (n) {
        std::memcpy(static_cast<std::byte*>(out) + recv_displs[k] * esize,
                    static_cast<const std::byte*>(from.in) + from.send_displs[rank_] * esize, n * esize);
      }
    }
    arrive(nullptr);  // nobody overwrites an input another rank still reads
  }

  void do_barrier() override { arrive(Post{CommOp::kBarrier, ScalarType::kU8, ReduceOp::kSum, 0, -1, nullptr}); }

  void do_send(const void* data, int64_t n, ScalarType t, int peer, int tag) override {
    std::unique_lock lk(group_->mu);
    auto msg = post_message(data, n, t, peer, tag);
    finish_send(lk, msg);
  }

  void do_recv(void* data, int64_t n, ScalarType t, int peer, int tag) override {
    std::unique_lock lk(group_->mu);
    take_message(lk, data, n, t, peer, tag);
  }

  void do_send_recv(const void* send_data, int64_t send_n, int dest, void* recv_data, int64_t recv_n, int src,
                    ScalarType t, int tag) override {
    std::unique_lock lk(group_->mu);
    auto msg = post_message(send_data, send_n, t, dest, tag);
    take_message(lk, recv_data, recv_n, t, src, tag);
    finish_send(lk, msg);
  }

  std::unique_ptr<detail::PendingSend> do_isend(const void* data, int64_t n, ScalarType t, int peer, int tag) override {
    std::lock_guard lk(group_->mu);
    auto msg = post_message(data, n, t, peer, tag, /*copy=*/true);
    if (!world_->options().synchronous_send) return nullptr;  // buffered: the receiver erases it
    return std::make_unique<SimPendingSend>(*this, msg);
  }

  std::unique_ptr<detail::PendingCollective> do_start_all_reduce(void* data, int64_t n, ScalarType t,
                                                                 ReduceOp op) override {
    return start(Post{CommOp::kAllReduce, t, op, n, -1, data}, data);
  }

  std::unique_ptr<detail::PendingCollective> do_start_reduce_scatter(const void* in, void* out, int64_t chunk,
                                                                     ScalarType t, ReduceOp op) override {
    return start(Post{CommOp::kReduceScatter, t, op, chunk, -1, in}, out);
  }

  std::unique_ptr<detail::PendingCollective> do_start_all_gather(const void* in, void* out, int64_t chunk,
                                                                 ScalarType t) override {
    return start(Post{CommOp::kAllGather, t, ReduceOp::kSum, chunk, -1, in}, out);
  }

 private:
  // Waits (group lock held) until done(), bounded by the world's timeout.
  template <class Done, class Describe>
  void wait(std::unique_lock<std::mutex>& lk, Done done, Describe describe) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(world_->options().timeout_seconds);
    while (!done()) {
      if (world_->aborted()) {
        throw SimAbortedError(fmt::format("comm '{}': rank {} stopped in {}: the simulated world was aborted ({})",
                                          name(), rank_, describe(), world_->abort_reason()));
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        const std::string msg =
            fmt::format("comm '{}': rank {} waited {:.1f} s in {}: deadlock, or a rank stopped calling into this group",
                        name(), rank_, world_->options().timeout_seconds, describe());
        world_->abort(msg);
        throw DistributedError(msg);
      }
      group_->cv.wait_for(lk, std::chrono::milliseconds(20));
    }
  }

  // One rendezvous of the whole group. With a post, the last arriver checks
  // that every rank called the same collective; the others see its verdict.
  void arrive(const Post* post) {
    SimGroup& g = *group_;
    std::unique_lock lk(g.mu);
    if (post) {
      Post& mine = g.posts[rank_];
      mine = *post;
      mine.seq = next_seq_++;
      if (auto slot = g.slots.find(mine.seq); slot != g.slots.end()) fail_mismatch(*slot->second, mine);
      g.blocking_seq[rank_] = static_cast<int64_t>(mine.seq);
    }
    const uint64_t generation = g.generation;
    if (++g.arrived == size()) {
      g.arrived = 0;
      if (post) g.phase_error = check_posts(g.posts);
      ++g.generation;
      g.cv.notify_all();
    } else {
      wait(
          lk, [&] { return g.generation != generation; },
          [&] {
            return fmt::format("{} ({} of {} ranks arrived)", post ? post_str(*post) : "a collective", g.arrived,
                               size());
          });
    }
    g.blocking_seq[rank_] = -1;
    if (post && !g.phase_error.empty()) throw DistributedError(g.phase_error);
  }
  void arrive(const Post& post) { arrive(&post); }

  // Empty when every rank called the same collective as its seq-th.
  std::string check_posts(const std::vector<Post>& posts) const {
    for (int k = 1; k < size(); ++k) {
      const Post &a = posts[0], &b = posts[k];
      const bool n_differs = a.n != b.n && a.op != CommOp::kAllToAll;  // all_to_all_v: checked pairwise below
      if (a.op != b.op || a.type != b.type || n_differs || a.root != b.root || a.nonblocking != b.nonblocking ||
          (a.op != CommOp::kAllGather && a.reduce != b.reduce)) {
        return fmt::format("comm '{}': collective mismatch: rank 0 called {} but rank {} called {}", name(),
                           post_str(a), k, post_str(b));
      }
      if (a.seq != b.seq) {
        return fmt::format("comm '{}': collective mismatch: rank 0 called {} as collective #{} but rank {} as #{}",
                           name(), post_str(a), a.seq, k, b.seq);
      }
    }
    return posts[0].op == CommOp::kAllToAll ? check_all_to_all_counts(posts) : "";
  }

  // Empty when what each rank sends to each other is what that one expects
  // (MPI would truncate, or leave part of the receive block unwritten).
  std::string check_all_to_all_counts(const std::vector<Post>& posts) const {
    for (int from = 0; from < size(); ++from) {
      for (int to = 0; to < size(); ++to) {
        const int64_t sent = posts[from].send_counts[to], expected = posts[to].recv_counts[from];
        if (sent != expected) {
          return fmt::format("comm '{}': all_to_all_v mismatch: rank {} sends {} {} to rank {}, which expects {}",
                             name(), from, sent, scalar_type_name(posts[from].type), to, expected);
        }
      }
    }
    return "";
  }

  // Another rank started a non-blocking collective as the seq-th, `mine` is
  // blocking (or the reverse): under MPI they would match each other.
  [[noreturn]] void fail_mismatch(const CollectiveSlot& slot, const Post& mine) {
    int other = 0;
    while (other < size() && (other == rank_ || !slot.posts[other].nonblocking)) ++other;  // a depositor
    fail_mismatch(other, slot.posts[other], mine);
  }
  [[noreturn]] void fail_mismatch(int other, const Post& theirs, const Post& mine) {
    const bool me_first = rank_ < other;
    const std::string msg = fmt::format("comm '{}': collective mismatch: rank {} called {} but rank {} called {}",
                                        name(), me_first ? rank_ : other, post_str(me_first ? mine : theirs),
                                        me_first ? other : rank_, post_str(me_first ? theirs : mine));
    world_->abort(msg);
    throw DistributedError(msg);
  }

  // Deposits a copy of this rank's input in the slot of the next sequence
  // number; the last depositor checks that every rank started the same.
  std::unique_ptr<detail::PendingCollective> start(Post post, void* out) {
    post.nonblocking = true;
    const size_t bytes =
        static_cast<size_t>(post.n) * scalar_bytes(post.type) * (post.op == CommOp::kReduceScatter ? size() : 1);
    std::vector<std::byte> copy(bytes);
    if (bytes) std::memcpy(copy.data(), post.in, bytes);
    post.in = nullptr;
    SimGroup& g = *group_;
    std::lock_guard lk(g.mu);
    post.seq = next_seq_++;
    for (int r = 0; r < size(); ++r) {
      if (g.blocking_seq[r] == static_cast<int64_t>(post.seq)) fail_mismatch(r, g.posts[r], post);
    }
    std::shared_ptr<CollectiveSlot>& slot = g.slots[post.seq];
    if (!slot) slot = std::make_shared<CollectiveSlot>(size());
    slot->posts[rank_] = post;
    slot->deposits[rank_] = std::move(copy);
    if (++slot->deposited == size()) {
      slot->error = check_posts(slot->posts);
      g.cv.notify_all();
    }
    return std::make_unique<SimPendingCollective>(*this, slot, post, out);
  }

  std::list<Message>::iterator post_message(const void* data, int64_t n, ScalarType t, int peer, int tag,
                                            bool copy = false) {
    SimGroup& g = *group_;
    Message m{.src = rank_, .dst = peer, .tag = tag, .type = t, .n = n, .data = data};
    if (copy || !world_->options().synchronous_send) {
      m.copy.resize(static_cast<size_t>(n) * scalar_bytes(t));
      if (n) std::memcpy(m.copy.data(), data, m.copy.size());
      m.data = m.copy.data();
    }
    g.messages.push_back(std::move(m));
    g.cv.notify_all();
    return std::prev(g.messages.end());
  }

  void finish_send(std::unique_lock<std::mutex>& lk, std::list<Message>::iterator msg) {
    if (!world_->options().synchronous_send) return;  // the receiver erases buffered messages
    const int peer = msg->dst, tag = msg->tag;
    wait(
        lk, [&] { return msg->consumed; }, [&] { return fmt::format("send to rank {} (tag {})", peer, tag); });
    group_->messages.erase(msg);
  }

  void take_message(std::unique_lock<std::mutex>& lk, void* data, int64_t n, ScalarType t, int peer, int tag) {
    SimGroup& g = *group_;
    auto it = g.messages.end();
    auto find = [&] {
      for (it = g.messages.begin(); it != g.messages.end(); ++it) {
        if (!it->consumed && it->src == peer && it->dst == rank_ && it->tag == tag) return true;
      }
      return false;
    };
    wait(lk, find, [&] { return fmt::format("recv from rank {} (tag {})", peer, tag); });
    if (it->type != t || it->n != n) {
      const std::string msg =
          fmt::format("comm '{}': rank {} expected {} {} from rank {} (tag {}) but the message holds {} {}", name(),
                      rank_, n, scalar_type_name(t), peer, tag, it->n, scalar_type_name(it->type));
      world_->abort(msg);
      throw DistributedError(msg);
    }
    if (n) std::memcpy(data, it->data, static_cast<size_t>(n) * scalar_bytes(t));
    if (world_->options().synchronous_send && !it->orphaned) {
      it->consumed = true;  // the sender erases it
    } else {
      g.messages.erase(it);
    }
    g.cv.notify_all();
  }

  SimWorld* world_;
  std::shared_ptr<SimGroup> group_;
  int rank_;
  std::vector<std::byte> scratch_;   // reduction result before it is copied out
  std::vector<const void*> inputs_;  // (size) per-rank input pointers of a reduction
  uint64_t next_seq_ = 0;            // collectives (blocking or not) this rank has called
};

SimPendingSend::~SimPendingSend() {
  if (done_) return;
  std::lock_guard lk(comm_->group_->mu);
  if (msg_->consumed) {
    comm_->group_->messages.erase(msg_);
  } else {
    msg_->orphaned = true;
  }
}

bool SimPendingSend::test() {
  if (done_) return true;
  std::lock_guard lk(comm_->group_->mu);
  if (msg_->consumed) {
    comm_->group_->messages.erase(msg_);
    done_ = true;
  }
  return done_;
}

void SimPendingSend::wait() {
  if (done_) return;
  std::unique_lock lk(comm_->group_->mu);
  const int peer = msg_->dst, tag = msg_->tag;
  comm_->wait(
      lk, [&] { return msg_->consumed; }, [&] { return fmt::format("isend to rank {} (tag {})", peer, tag); });
  comm_->group_->messages.erase(msg_);
  done_ = true;
}

bool SimPendingCollective::test() {
  if (done_) return true;
  std::unique_lock lk(comm_->group_->mu);
  if (slot_->deposited < comm_->size()) return false;
  finish(lk);
  return true;
}

void SimPendingCollective::wait() {
  if (done_) return;
  std::unique_lock lk(comm_->group_->mu);
  const int size = comm_->size();
  comm_->wait(
      lk, [&] { return slot_->deposited == size; },
      [&] { return fmt::format("{} ({} of {} ranks started it)", post_str(post_), slot_->deposited, size); });
  finish(lk);
}

// Every rank has deposited (lock held): fold this rank's result from the
// deposits, which nobody writes any more, without holding the lock.
void SimPendingCollective::finish(std::unique_lock<std::mutex>& lk) {
  if (!slot_->error.empty()) throw DistributedError(slot_->error);
  lk.unlock();
  const int size = comm_->size();
  if (post_.op == CommOp::kAllGather) {  // rank k's deposit is chunk k of the output
    const size_t bytes = static_cast<size_t>(post_.n) * scalar_bytes(post_.type);
    for (int k = 0; k < size; ++k)
      if (bytes) std::memcpy(static_cast<std::byte*>(out_) + k * bytes, slot_->deposits[k].data(), bytes);
  } else {
    fold(size);
  }
  lk.lock();
  if (++slot_->collected == size) comm_->group_->slots.erase(post_.seq);
  done_ = true;
}

void SimPendingCollective::fold(int size) {
  const size_t offset =
      post_.op == CommOp::kReduceScatter ? static_cast<size_t>(comm_->rank_ * post_.n * scalar_bytes(post_.type)) : 0;
  std::vector<const void*> inputs(size);
  for (int k = 0; k < size; ++k) inputs[k] = slot_->deposits[k].data() + offset;
  detail::reduce_in_rank_order(out_, inputs.data(), size, post_.n, post_.type, post_.reduce);
}

}  // namespace

std::unique_ptr<Comm> detail::make_sim_comm(SimWorld& world, std::shared_ptr<SimGroup> group, int rank) {
  return std::make_unique<SimComm>(world, std::move(group), rank);
}

}  // namespace mtrain::parallel
