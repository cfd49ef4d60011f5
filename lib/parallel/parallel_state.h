// ParallelState: this rank's view of the process grid together with one
// communicator per group kind it belongs to (Megatron's parallel_state, but
// an object passed explicitly instead of module globals). Built by
//   make_mpi_parallel_state (mpi_comm.h)   one MPI rank per simulated NPU
//   make_sim_parallel_state (sim_comm.h)   ranks as threads of one process
//   make_self_parallel_state               world of one rank, no MPI
//   make_meta_parallel_state               any rank of a dry run, no data moves
// It owns its communicators: destroy it before MPI_Finalize.
#pragma once

#include <array>
#include <memory>

#include "parallel/comm.h"
#include "parallel/process_grid.h"

namespace mtrain::parallel {

class ParallelState {
 public:
  using GroupComms = std::array<std::unique_ptr<Comm>, kGroupKindCount>;

  // Checks that every communicator matches the grid (size and this rank's
  // position); `groups[k]` is null exactly when `rank` is in no group of kind k.
  ParallelState(ProcessGrid grid, int rank, std::unique_ptr<Comm> world, GroupComms groups);
  // The same with a grid shared by other states (a dry run's rank classes).
  ParallelState(std::shared_ptr<const ProcessGrid> grid, int rank, std::unique_ptr<Comm> world, GroupComms groups);
  ParallelState(ParallelState&&) noexcept = default;
  ParallelState& operator=(ParallelState&&) noexcept = default;

  const ProcessGrid& grid() const { return *grid_; }
  int rank() const { return rank_; }
  int world_size() const { return grid_->world_size(); }
  RankCoords coords() const { return coords_; }

  Comm& world() { return *world_; }
  bool in_group(GroupKind kind) const { return groups_[static_cast<int>(kind)] != nullptr; }
  // Throws (a bug in the caller) if this rank is in no group of `kind`.
  Comm& group(GroupKind kind);
  Comm& tp() { return group(GroupKind::kTensor); }
  Comm& pp() { return group(GroupKind::kPipeline); }
  Comm& dp() { return group(GroupKind::kData); }
  Comm& cp() { return group(GroupKind::kContext); }
  Comm& dp_cp() { return group(GroupKind::kDataContext); }
  Comm& model() { return group(GroupKind::kModel); }
  // The expert generator's groups (tp=ETP, ep=EP, dp=world/(ETP*EP*PP), cp=1):
  // token dispatch over ep, expert weights split over expert_tp, their
  // gradients reduced over expert_dp (Megatron's expert_data_parallel_group,
  // which spans CP too), the expert part of the grad norm over tp_ep_pp.
  Comm& ep() { return group(GroupKind::kExpert); }
  Comm& expert_tp() { return group(GroupKind::kExpertTensor); }
  Comm& expert_dp() { return group(GroupKind::kExpertData); }
  Comm& tp_ep() { return group(GroupKind::kExpertTensorModel); }
  Comm& tp_ep_pp() { return group(GroupKind::kExpertTensorModelPipeline); }
  ExpertRankCoords expert_coords() const { return grid_->expert_coords(rank_); }

  bool is_first_pipeline_stage() const { return coords_.pp == 0; }
  bool is_last_pipeline_stage() const { return coords_.pp == grid_->pp() - 1; }

  // Sets the observer on the world and every group communicator.
  void set_observer(const CommObserver& observer);

 private:
  std::shared_ptr<const ProcessGrid> grid_;
  int rank_;
  RankCoords coords_;
  std::unique_ptr<Comm> world_;
  GroupComms groups_;
};

// A world of one rank (grid.world_size() must be 1): SelfComm everywhere.
ParallelState make_self_parallel_state(const ProcessGrid& grid);
// Rank `rank` of a shape-only run: MetaComm everywhere, sized from the grid.
ParallelState make_meta_parallel_state(const ProcessGrid& grid, int rank);
ParallelState make_meta_parallel_state(std::shared_ptr<const ProcessGrid> grid, int rank);

}  // namespace mtrain::parallel
