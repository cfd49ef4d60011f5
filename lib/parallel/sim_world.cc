// SimWorld: the threads that run the simulated ranks, the registry of
// communicator instances, and the abort that stops every rank when one fails.
#include <fmt/format.h>

#include <exception>
#include <thread>

#include "common/errors.h"
#include "parallel/sim_comm.h"
#include "parallel/sim_comm_internal.h"

namespace mtrain::parallel {

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
  std::shared_ptr<detail::SimGroup> group;
  {
    std::lock_guard lk(mu_);
    auto& taken = taken_[key];
    taken.resize(size_, 0);
    auto& instances = instances_[key];
    const int index = taken[global_rank]++;
    if (index == static_cast<int>(instances.size()))
      instances.push_back(std::make_shared<detail::SimGroup>(name, members));
    group = instances[index];
  }
  return detail::make_sim_comm(*this, std::move(group), position);
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
      } catch (const detail::SimAbortedError&) {
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
