#include "parallel/sim_comm.h"

#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <list>
#include <thread>

#include "common/errors.h"
#include "parallel/reduce_kernels.h"

namespace mtrain::parallel {
namespace detail {

// What one rank brought to a collective.
struct Post {
  CommOp op = CommOp::kBarrier;
  ScalarType type = ScalarType::kF32;
  ReduceOp reduce = ReduceOp::kSum;
  int64_t n = 0;
  int root = -1;
  const void* in = nullptr;
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

struct SimGroup {
  SimGroup(std::string n, RankGroup m) : name(std::move(n)), members(std::move(m)), posts(members.size()) {}
  std::string name;
  RankGroup members;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  std::vector<Post> posts;      // (size) the current collective
  std::string phase_error;      // set by the last arriver when the posts disagree
  std::list<Message> messages;  // in send order; list iterators stay valid
};

}  // namespace detail

namespace {

using detail::Message;
using detail::Post;
using detail::SimGroup;

// Thrown by ranks that stop because another rank failed; run() prefers the root cause.
struct SimAbortedError : DistributedError {
  using DistributedError::DistributedError;
};

std::string post_str(const Post& p) {
  std::string s = fmt::format("{}({} x {}", comm_op_name(p.op), scalar_type_name(p.type), p.n);
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

class SimComm final : public Comm {
  friend class SimPendingSend;

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
    if (post) g.posts[rank_] = *post;
    const uint64_t generation = g.generation;
    if (++g.arrived == size()) {
      g.arrived = 0;
      if (post) g.phase_error = check_posts();
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
    if (post && !g.phase_error.empty()) throw DistributedError(g.phase_error);
  }
  void arrive(const Post& post) { arrive(&post); }

  std::string check_posts() const {
    const auto& posts = group_->posts;
    for (int k = 1; k < size(); ++k) {
      const Post &a = posts[0], &b = posts[k];
      if (a.op != b.op || a.type != b.type || a.n != b.n || a.root != b.root ||
          (a.op != CommOp::kAllGather && a.reduce != b.reduce)) {
        return fmt::format("comm '{}': collective mismatch: rank 0 called {} but rank {} called {}", name(),
                           post_str(a), k, post_str(b));
      }
    }
    return "";
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

}  // namespace

SimWorld::SimWorld(int size, SimWorldOptions options) : size_(size), options_(options) {
  if (size < 1)
    throw Error(ExitCode::kInternal, fmt::format("a simulated world needs at least one rank, got {}", size));
}

SimWorld::~SimWorld() = default;

std::unique_ptr<Comm> SimWorld::make_comm(const std::string& name, const RankGroup& members, int global_rank) {
  int position = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] < 0 || members[i] >= size_) {
      throw Error(ExitCode::kInternal, fmt::format("comm '{}': member {} is outside the simulated world of {} ranks",
                                                   name, members[i], size_));
    }
    if (members[i] == global_rank) position = static_cast<int>(i);
  }
  if (position < 0) {
    throw Error(ExitCode::kInternal,
                fmt::format("comm '{}': rank {} is not in {}", name, global_rank, rank_group_str(members)));
  }
  const std::string key = name + "|" + rank_group_str(members);
  std::shared_ptr<SimGroup> group;
  {
    std::lock_guard lk(mu_);
    auto& taken = taken_[key];
    taken.resize(size_, 0);
    auto& instances = instances_[key];
    const int index = taken[global_rank]++;
    if (index == static_cast<int>(instances.size())) instances.push_back(std::make_shared<SimGroup>(name, members));
    group = instances[index];
  }
  return std::make_unique<SimComm>(*this, std::move(group), position);
}

std::unique_ptr<Comm> SimWorld::make_world_comm(int global_rank) {
  RankGroup all(size_);
  for (int r = 0; r < size_; ++r) all[r] = r;
  return make_comm("world", all, global_rank);
}

void SimWorld::abort(const std::string& reason) {
  {
    std::lock_guard lk(mu_);
    if (abort_reason_.empty()) abort_reason_ = reason;
  }
  aborted_.store(true, std::memory_order_release);
}

std::string SimWorld::abort_reason() const {
  std::lock_guard lk(mu_);
  return abort_reason_;
}

void SimWorld::run(const std::function<void(int rank)>& body) {
  std::mutex mu;
  std::exception_ptr root_cause, consequence;
  std::vector<std::thread> threads;
  threads.reserve(size_);
  for (int r = 0; r < size_; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const SimAbortedError&) {
        std::lock_guard lk(mu);
        if (!consequence) consequence = std::current_exception();
      } catch (const std::exception& e) {
        {
          std::lock_guard lk(mu);
          if (!root_cause) root_cause = std::current_exception();
        }
        abort(fmt::format("rank {} failed: {}", r, e.what()));
      }
    });
  }
  for (auto& t : threads) t.join();
  if (root_cause) std::rethrow_exception(root_cause);
  if (consequence) std::rethrow_exception(consequence);
}

ParallelState make_sim_parallel_state(const ProcessGrid& grid, SimWorld& world, int rank) {
  if (grid.world_size() != world.size()) {
    throw DistributedError(
        fmt::format("the process grid has {} ranks but the simulated world has {}", grid.world_size(), world.size()));
  }
  ParallelState::GroupComms groups;
  for (int k = 0; k < kGroupKindCount; ++k) {
    const auto kind = static_cast<GroupKind>(k);
    const RankGroup& members = grid.group_of(kind, rank);
    if (!members.empty()) groups[k] = world.make_comm(group_kind_name(kind), members, rank);
  }
  return ParallelState(grid, rank, world.make_world_comm(rank), std::move(groups));
}

}  // namespace mtrain::parallel
