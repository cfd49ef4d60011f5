// ProcessGrid: the rank arithmetic of Megatron-LM's parallel_state, with no
// MPI and no global state. Ranks are laid out in the order "tp-cp-ep-dp-pp"
// (tp varies fastest; "tp-cp-ep-pp-dp" with use_tp_pp_dp_mapping), so
//   rank = tp_rank + cp_rank*TP + dp_rank*TP*CP + pp_rank*TP*CP*DP
// and every group kind is the set of ranks that differ only in the named
// coordinates (Megatron's generate_masked_orthogonal_rank_groups). Expert
// groups come from a second generator (tp=ETP, ep=EP, dp=world/(ETP*EP*PP),
// cp=1) over the same order, exactly as Megatron builds them.
//
// The same object answers for every rank, so a dry run can plan any rank and
// MPI/simulated communicators are built from the member lists it returns.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mtrain::parallel {

// Sizes as the user gives them (Megatron flag names). world_size is the number
// of ranks (MPI world size, or the simulated device count of a dry run).
struct ProcessGridConfig {
  int world_size = 1;
  int tensor_model_parallel_size = 1;
  int pipeline_model_parallel_size = 1;
  int context_parallel_size = 1;
  int expert_model_parallel_size = 1;
  int expert_tensor_parallel_size = 0;  // 0 = same as TP (Megatron's None)
  bool use_tp_pp_dp_mapping = false;    // order tp-cp-ep-pp-dp instead of tp-cp-ep-dp-pp
};

// Every communicator kind Megatron creates (core_v0.15 initialize_model_parallel).
// The name is the generator token, also used as the communicator's name.
enum class GroupKind : int {
  kTensor,                     // "tp"
  kPipeline,                   // "pp"
  kData,                       // "dp"
  kContext,                    // "cp"
  kModel,                      // "tp-pp"     model-parallel group
  kDataContext,                // "dp-cp"     gradient reduction with CP
  kTensorContext,              // "tp-cp"
  kTensorData,                 // "tp-dp"
  kTensorDataContext,          // "tp-dp-cp"
  kEmbedding,                  // "embd"      first + last stage of each pipeline (tied embeddings)
  kPositionEmbedding,          // "pos-embd"  first stage of each pipeline
  kExpert,                     // "ep"        expert generator
  kExpertTensor,               // "expt-tp"   expert generator's tp
  kExpertTensorModel,          // "tp-ep"     expert generator
  kExpertTensorModelPipeline,  // "tp-ep-pp"  expert generator
  kExpertData,                 // "expt-dp"   expert generator's dp
  kCount
};
inline constexpr int kGroupKindCount = static_cast<int>(GroupKind::kCount);
const char* group_kind_name(GroupKind kind);

// Coordinates of a rank in the dense (non-expert) grid.
struct RankCoords {
  int tp = 0, cp = 0, dp = 0, pp = 0;
  bool operator==(const RankCoords&) const = default;
};
// Coordinates of a rank in the expert grid.
struct ExpertRankCoords {
  int tp = 0, ep = 0, dp = 0, pp = 0;
  bool operator==(const ExpertRankCoords&) const = default;
};

using RankGroup = std::vector<int>;  // global ranks, in group-rank order

// Size and stride of each grid dimension, indexed kTp, kCp, kEp, kDp, kPp:
// rank = sum(coordinate[dim] * stride[dim]).
enum GridDim : int { kTp, kCp, kEp, kDp, kPp, kDims };
struct GridLayout {
  std::array<int, kDims> size{1, 1, 1, 1, 1};
  std::array<int, kDims> stride{1, 1, 1, 1, 1};
};

// Megatron's generate_masked_orthogonal_rank_groups: `sizes` in layout order
// (fastest first), `mask[i]` selects the dimensions a group spans. Returns
// world/prod(masked sizes) groups, each listing ranks in group-rank order.
std::vector<RankGroup> masked_orthogonal_rank_groups(int world_size, const std::vector<int>& sizes,
                                                     const std::vector<bool>& mask);

class ProcessGrid {
 public:
  // Validates with Megatron's messages (ConfigError), e.g.
  // "world_size (6) is not divisible by 4"; builds every group of every kind.
  explicit ProcessGrid(const ProcessGridConfig& config);

  const ProcessGridConfig& config() const { return config_; }
  int world_size() const { return config_.world_size; }
  int tp() const { return config_.tensor_model_parallel_size; }
  int pp() const { return config_.pipeline_model_parallel_size; }
  int cp() const { return config_.context_parallel_size; }
  int dp() const { return dp_; }
  int ep() const { return config_.expert_model_parallel_size; }
  int expert_tp() const { return expert_tp_; }
  int expert_dp() const { return expert_dp_; }
  // "tp-cp-ep-dp-pp" or "tp-cp-ep-pp-dp".
  const std::string& order() const { return order_; }
  const GridLayout& layout() const { return dense_; }
  const GridLayout& expert_layout() const { return expert_; }

  RankCoords coords(int rank) const;
  ExpertRankCoords expert_coords(int rank) const;
  int rank_of(const RankCoords& c) const;

  // Every group of `kind`, in Megatron's creation order.
  const std::vector<RankGroup>& all_groups(GroupKind kind) const;
  // The group of `kind` holding `rank`; empty if `rank` is in none (only
  // possible for kEmbedding / kPositionEmbedding on middle pipeline stages).
  const RankGroup& group_of(GroupKind kind, int rank) const;
  // Index of that group in all_groups(kind), or -1.
  int group_index(GroupKind kind, int rank) const;
  // Position of `rank` in its group of `kind` (its rank in that communicator), or -1.
  int rank_in_group(GroupKind kind, int rank) const;

  bool is_first_pipeline_stage(int rank) const { return coords(rank).pp == 0; }
  bool is_last_pipeline_stage(int rank) const { return coords(rank).pp == pp() - 1; }

  // One line per group kind for logs, e.g. "tp: [[0, 1], [2, 3]]".
  std::string describe() const;

  // Per group name ("tp", "dp", ..., and "world"): how many nodes of
  // `per_node` ranks `rank`'s group spans (1: inside one node; more: its
  // traffic also crosses the inter-node links).
  std::vector<std::pair<std::string, int>> group_nodes(int rank, int per_node) const;
  // The nodes group `name` spans in a group_nodes() list (1: not listed).
  static int nodes_of(const std::vector<std::pair<std::string, int>>& group_nodes, std::string_view name);

 private:
  void check_rank(int rank) const;

  ProcessGridConfig config_;
  GridLayout dense_, expert_;
  int dp_ = 1, expert_tp_ = 1, expert_dp_ = 1;
  std::string order_;
  std::array<std::vector<RankGroup>, kGroupKindCount> groups_;
  // group_index_[kind][rank] -> index into groups_[kind], or -1.
  std::array<std::vector<int>, kGroupKindCount> group_index_;
  std::array<std::vector<int>, kGroupKindCount> rank_in_group_;
};

std::string rank_group_str(const RankGroup& g);  // "[0, 2, 4]"

}  // namespace mtrain::parallel
