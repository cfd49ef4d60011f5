#include "parallel/process_grid.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>
#include <sstream>

#include "common/errors.h"

namespace mtrain::parallel {
namespace {

// Megatron's RankGenerator for one order string: every token of
// {tp, cp, ep, dp, pp} appears in the order, so no token is appended.
class RankGenerator {
 public:
  RankGenerator(const std::string& order, int tp, int cp, int ep, int dp, int pp) {
    std::stringstream ss(order);
    for (std::string tok; std::getline(ss, tok, '-');) {
      tokens_.push_back(tok);
      sizes_.push_back(tok == "tp" ? tp : tok == "cp" ? cp : tok == "ep" ? ep : tok == "dp" ? dp : pp);
    }
    world_ = tp * cp * ep * dp * pp;
  }

  // Groups spanning the dimensions named in `spec` ("tp", "dp-cp", ...).
  std::vector<RankGroup> ranks(const std::string& spec) const {
    std::vector<bool> mask(tokens_.size(), false);
    std::stringstream ss(spec);
    for (std::string tok; std::getline(ss, tok, '-');) {
      auto it = std::find(tokens_.begin(), tokens_.end(), tok);
      mask[it - tokens_.begin()] = true;
    }
    return masked_orthogonal_rank_groups(world_, sizes_, mask);
  }

  // Size and stride of each dimension, indexed tp, cp, ep, dp, pp.
  GridLayout layout() const {
    static const char* const kNames[kDims] = {"tp", "cp", "ep", "dp", "pp"};
    GridLayout l;
    for (int dim = 0; dim < kDims; ++dim) {
      int stride = 1;
      for (size_t i = 0; i < tokens_.size(); ++i) {
        if (tokens_[i] == kNames[dim]) {
          l.size[dim] = sizes_[i];
          l.stride[dim] = stride;
        }
        stride *= sizes_[i];
      }
    }
    return l;
  }

 private:
  std::vector<std::string> tokens_;
  std::vector<int> sizes_;
  int world_ = 1;
};

void require_positive(const char* flag, int value) {
  if (value < 1) {
    throw ConfigError(fmt::format("{} must be a positive integer, got {}", flag, value),
                      "parallel sizes count ranks; use 1 to disable a kind of parallelism");
  }
}

std::string groups_str(const std::vector<RankGroup>& groups) {
  std::string s = "[";
  for (size_t i = 0; i < groups.size(); ++i) s += (i ? ", " : "") + rank_group_str(groups[i]);
  return s + "]";
}

}  // namespace

const char* group_kind_name(GroupKind kind) {
  switch (kind) {
    case GroupKind::kTensor:
      return "tp";
    case GroupKind::kPipeline:
      return "pp";
    case GroupKind::kData:
      return "dp";
    case GroupKind::kContext:
      return "cp";
    case GroupKind::kModel:
      return "tp-pp";
    case GroupKind::kDataContext:
      return "dp-cp";
    case GroupKind::kTensorContext:
      return "tp-cp";
    case GroupKind::kTensorData:
      return "tp-dp";
    case GroupKind::kTensorDataContext:
      return "tp-dp-cp";
    case GroupKind::kEmbedding:
      return "embd";
    case GroupKind::kPositionEmbedding:
      return "pos-embd";
    case GroupKind::kExpert:
      return "ep";
    case GroupKind::kExpertTensor:
      return "expt-tp";
    case GroupKind::kExpertTensorModel:
      return "tp-ep";
    case GroupKind::kExpertTensorModelPipeline:
      return "tp-ep-pp";
    case GroupKind::kExpertData:
      return "expt-dp";
    case GroupKind::kCount:
      break;
  }
  return "?";
}

std::string rank_group_str(const RankGroup& g) {
  std::string s = "[";
  for (size_t i = 0; i < g.size(); ++i) s += (i ? ", " : "") + std::to_string(g[i]);
  return s + "]";
}

std::vector<RankGroup> masked_orthogonal_rank_groups(int world_size, const std::vector<int>& sizes,
                                                     const std::vector<bool>& mask) {
  // Global stride of dimension i = product of the sizes before it.
  std::vector<int> masked_shape, unmasked_shape, masked_stride, unmasked_stride;
  int stride = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    (mask[i] ? masked_shape : unmasked_shape).push_back(sizes[i]);
    (mask[i] ? masked_stride : unmasked_stride).push_back(stride);
    stride *= sizes[i];
  }
  // Decomposes `index` over `shape` (first fastest) and dots it with `strides`.
  auto place = [](int index, const std::vector<int>& shape, const std::vector<int>& strides) {
    int offset = 0;
    for (size_t i = 0; i < shape.size(); ++i) {
      offset += (index % shape[i]) * strides[i];
      index /= shape[i];
    }
    return offset;
  };
  const int group_size = std::accumulate(masked_shape.begin(), masked_shape.end(), 1, std::multiplies<int>());
  const int num_groups = world_size / group_size;
  std::vector<RankGroup> groups(num_groups);
  for (int g = 0; g < num_groups; ++g) {
    const int base = place(g, unmasked_shape, unmasked_stride);
    groups[g].reserve(group_size);
    for (int r = 0; r < group_size; ++r) groups[g].push_back(base + place(r, masked_shape, masked_stride));
  }
  return groups;
}

ProcessGrid::ProcessGrid(const ProcessGridConfig& config) : config_(config) {
  require_positive("world_size", config_.world_size);
  require_positive("tensor_model_parallel_size", config_.tensor_model_parallel_size);
  require_positive("pipeline_model_parallel_size", config_.pipeline_model_parallel_size);
  require_positive("context_parallel_size", config_.context_parallel_size);
  require_positive("expert_model_parallel_size", config_.expert_model_parallel_size);
  if (config_.expert_tensor_parallel_size == 0) config_.expert_tensor_parallel_size = tp();
  require_positive("expert_tensor_parallel_size", config_.expert_tensor_parallel_size);
  const int world = config_.world_size;

  // Dense grid (parallel_state.initialize_model_parallel).
  const int64_t model_size = int64_t{tp()} * pp() * cp();
  if (world % model_size != 0) {
    throw ConfigError(fmt::format("world_size ({}) is not divisible by {}", world, model_size),
                      fmt::format("tensor_model_parallel_size ({}) x pipeline_model_parallel_size ({}) x "
                                  "context_parallel_size ({}) = {} must divide the number of ranks",
                                  tp(), pp(), cp(), model_size));
  }
  dp_ = static_cast<int>(world / model_size);
  order_ = config_.use_tp_pp_dp_mapping ? "tp-cp-ep-pp-dp" : "tp-cp-ep-dp-pp";

  // Expert grid.
  expert_tp_ = config_.expert_tensor_parallel_size;
  const int64_t expert_model_size = int64_t{expert_tp_} * ep() * pp();
  if (world % expert_model_size != 0) {
    throw ConfigError(fmt::format("world_size ({}) is not divisible by expert_tensor_model_pipeline_parallel size ({})",
                                  world, expert_model_size),
                      fmt::format("expert_tensor_parallel_size ({}) x expert_model_parallel_size ({}) x "
                                  "pipeline_model_parallel_size ({}) must divide the number of ranks",
                                  expert_tp_, ep(), pp()));
  }
  expert_dp_ = static_cast<int>(world / expert_model_size);
  if (!(order_.ends_with("pp") || pp() == 1 || expert_dp_ == dp_)) {
    throw ConfigError(
        "When not using pp-last rank ordering, the data parallel size of the attention and moe layers must be the same",
        fmt::format("with use_tp_pp_dp_mapping, expert data parallel size ({}) must equal data parallel size ({})",
                    expert_dp_, dp_));
  }

  const RankGenerator dense(order_, tp(), cp(), 1, dp_, pp());
  const RankGenerator expert(order_, expert_tp_, 1, ep(), expert_dp_, pp());
  auto& g = groups_;
  auto at = [&g](GroupKind k) -> std::vector<RankGroup>& { return g[static_cast<int>(k)]; };
  at(GroupKind::kTensor) = dense.ranks("tp");
  at(GroupKind::kPipeline) = dense.ranks("pp");
  at(GroupKind::kData) = dense.ranks("dp");
  at(GroupKind::kContext) = dense.ranks("cp");
  at(GroupKind::kModel) = dense.ranks("tp-pp");
  at(GroupKind::kDataContext) = dense.ranks("dp-cp");
  at(GroupKind::kTensorContext) = dense.ranks("tp-cp");
  at(GroupKind::kTensorData) = dense.ranks("tp-dp");
  at(GroupKind::kTensorDataContext) = dense.ranks("tp-dp-cp");
  for (const RankGroup& stages : at(GroupKind::kPipeline)) {  // default_embedding_ranks
    at(GroupKind::kEmbedding)
        .push_back(stages.size() == 1 ? RankGroup{stages[0]} : RankGroup{stages[0], stages.back()});
    at(GroupKind::kPositionEmbedding).push_back(RankGroup{stages[0]});
  }
  at(GroupKind::kExpert) = expert.ranks("ep");
  at(GroupKind::kExpertTensor) = expert.ranks("tp");
  at(GroupKind::kExpertTensorModel) = expert.ranks("tp-ep");
  at(GroupKind::kExpertTensorModelPipeline) = expert.ranks("tp-ep-pp");
  at(GroupKind::kExpertData) = expert.ranks("dp");

  dense_ = dense.layout();
  expert_ = expert.layout();
  if (expert.ranks("pp") != at(GroupKind::kPipeline)) {
    throw ConfigError(
        fmt::format("Pipeline parallel groups are expected to be the same for Non-Expert and Expert "
                    "part, but got {} and {}",
                    groups_str(at(GroupKind::kPipeline)), groups_str(expert.ranks("pp"))));
  }

  for (int k = 0; k < kGroupKindCount; ++k) {
    group_index_[k].assign(world, -1);
    rank_in_group_[k].assign(world, -1);
    for (size_t gi = 0; gi < g[k].size(); ++gi) {
      for (size_t pos = 0; pos < g[k][gi].size(); ++pos) {
        group_index_[k][g[k][gi][pos]] = static_cast<int>(gi);
        rank_in_group_[k][g[k][gi][pos]] = static_cast<int>(pos);
      }
    }
  }
}

void ProcessGrid::check_rank(int rank) const {
  if (rank < 0 || rank >= world_size()) {
    throw Error(ExitCode::kInternal,
                fmt::format("rank {} is outside the process grid of {} ranks", rank, world_size()));
  }
}

RankCoords ProcessGrid::coords(int rank) const {
  check_rank(rank);
  auto at = [&](int dim) { return (rank / dense_.stride[dim]) % dense_.size[dim]; };
  return RankCoords{at(kTp), at(kCp), at(kDp), at(kPp)};
}

ExpertRankCoords ProcessGrid::expert_coords(int rank) const {
  check_rank(rank);
  auto at = [&](int dim) { return (rank / expert_.stride[dim]) % expert_.size[dim]; };
  return ExpertRankCoords{at(kTp), at(kEp), at(kDp), at(kPp)};
}

int ProcessGrid::rank_of(const RankCoords& c) const {
  const int coord[kDims] = {c.tp, c.cp, 0, c.dp, c.pp};
  int rank = 0;
  for (int dim = 0; dim < kDims; ++dim) {
    if (coord[dim] < 0 || coord[dim] >= dense_.size[dim]) {
      throw Error(
          ExitCode::kInternal,
          fmt::format("coordinates (tp {}, cp {}, dp {}, pp {}) are outside the grid (TP {}, CP {}, DP {}, PP {})",
                      c.tp, c.cp, c.dp, c.pp, tp(), cp(), dp_, pp()));
    }
    rank += coord[dim] * dense_.stride[dim];
  }
  return rank;
}

const std::vector<RankGroup>& ProcessGrid::all_groups(GroupKind kind) const {
  return groups_.at(static_cast<int>(kind));
}

const RankGroup& ProcessGrid::group_of(GroupKind kind, int rank) const {
  static const RankGroup kNone;
  const int gi = group_index(kind, rank);
  return gi < 0 ? kNone : groups_[static_cast<int>(kind)][gi];
}

int ProcessGrid::group_index(GroupKind kind, int rank) const {
  check_rank(rank);
  return group_index_.at(static_cast<int>(kind))[rank];
}

int ProcessGrid::rank_in_group(GroupKind kind, int rank) const {
  check_rank(rank);
  return rank_in_group_.at(static_cast<int>(kind))[rank];
}

std::vector<std::pair<std::string, int>> ProcessGrid::group_nodes(int rank, int per_node) const {
  per_node = std::max(1, per_node);
  std::vector<std::pair<std::string, int>> out;
  for (int k = 0; k < kGroupKindCount; ++k) {
    const auto kind = static_cast<GroupKind>(k);
    std::set<int> nodes;
    for (int m : group_of(kind, rank)) nodes.insert(m / per_node);
    out.emplace_back(group_kind_name(kind), static_cast<int>(nodes.size()));
  }
  out.emplace_back("world", (world_size() + per_node - 1) / per_node);
  return out;
}

int ProcessGrid::nodes_of(const std::vector<std::pair<std::string, int>>& group_nodes, std::string_view name) {
  for (const auto& [group, n] : group_nodes)
    if (group == name) return n;
  return 1;
}

std::string ProcessGrid::describe() const {
  std::string s = fmt::format("order {}: world {} = TP {} x CP {} x DP {} x PP {} (experts: ETP {} x EP {} x EDP {})\n",
                              order_, world_size(), tp(), cp(), dp_, pp(), expert_tp_, ep(), expert_dp_);
  for (int k = 0; k < kGroupKindCount; ++k) {
    s += fmt::format("  {}: {}\n", group_kind_name(static_cast<GroupKind>(k)), groups_str(groups_[k]));
  }
  return s;
}

}  // namespace mtrain::parallel
