#include "parallel/parallel_state.h"

#include <fmt/format.h>

#include "common/errors.h"
#include "parallel/local_comm.h"

namespace mtrain::parallel {

ParallelState::ParallelState(ProcessGrid grid, int rank, std::unique_ptr<Comm> world, GroupComms groups)
    : ParallelState(std::make_shared<const ProcessGrid>(std::move(grid)), rank, std::move(world), std::move(groups)) {}

ParallelState::ParallelState(std::shared_ptr<const ProcessGrid> grid, int rank, std::unique_ptr<Comm> world,
                             GroupComms groups)
    : grid_(std::move(grid)), rank_(rank), world_(std::move(world)), groups_(std::move(groups)) {
  const ProcessGrid& g = *grid_;
  coords_ = g.coords(rank_);  // checks the rank
  if (!world_ || world_->size() != g.world_size() || world_->rank() != rank_) {
    throw DistributedError(fmt::format("world communicator ({} of {}) does not match rank {} of a grid of {} ranks",
                                       world_ ? world_->rank() : -1, world_ ? world_->size() : 0, rank_,
                                       g.world_size()));
  }
  for (int k = 0; k < kGroupKindCount; ++k) {
    const auto kind = static_cast<GroupKind>(k);
    const RankGroup& members = g.group_of(kind, rank_);
    const Comm* c = groups_[k].get();
    const bool ok = members.empty() ? c == nullptr
                                    : c != nullptr && c->size() == static_cast<int>(members.size()) &&
                                          c->rank() == g.rank_in_group(kind, rank_);
    if (!ok) {
      throw DistributedError(fmt::format("rank {}: communicator for group '{}' does not match the grid (expected {})",
                                         rank_, group_kind_name(kind), rank_group_str(members)));
    }
  }
}

Comm& ParallelState::group(GroupKind kind) {
  Comm* c = groups_.at(static_cast<int>(kind)).get();
  if (c == nullptr) {
    throw Error(ExitCode::kInternal,
                fmt::format("rank {} is not a member of any '{}' group", rank_, group_kind_name(kind)));
  }
  return *c;
}

void ParallelState::set_observer(const CommObserver& observer) {
  world_->set_observer(observer);
  for (auto& c : groups_) {
    if (c) c->set_observer(observer);
  }
}

ParallelState make_self_parallel_state(const ProcessGrid& grid) {
  if (grid.world_size() != 1) {
    throw DistributedError(
        fmt::format("a process grid of {} ranks needs an MPI or simulated world, not a single process",
                    grid.world_size()),
        "launch with mpirun (or NPROC_PER_NODE), or set all parallel sizes to 1");
  }
  ParallelState::GroupComms groups;
  for (int k = 0; k < kGroupKindCount; ++k) {
    groups[k] = std::make_unique<SelfComm>(group_kind_name(static_cast<GroupKind>(k)));
  }
  return ParallelState(grid, 0, std::make_unique<SelfComm>("world"), std::move(groups));
}

ParallelState make_meta_parallel_state(const ProcessGrid& grid, int rank) {
  return make_meta_parallel_state(std::make_shared<const ProcessGrid>(grid), rank);
}

ParallelState make_meta_parallel_state(std::shared_ptr<const ProcessGrid> shared, int rank) {
  const ProcessGrid& grid = *shared;
  ParallelState::GroupComms groups;
  for (int k = 0; k < kGroupKindCount; ++k) {
    const auto kind = static_cast<GroupKind>(k);
    const RankGroup& members = grid.group_of(kind, rank);
    if (!members.empty()) {
      groups[k] = std::make_unique<MetaComm>(group_kind_name(kind), grid.rank_in_group(kind, rank),
                                             static_cast<int>(members.size()));
    }
  }
  auto world = std::make_unique<MetaComm>("world", rank, grid.world_size());
  return ParallelState(std::move(shared), rank, std::move(world), std::move(groups));
}

}  // namespace mtrain::parallel
