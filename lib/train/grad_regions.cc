#include "train/grad_regions.h"

#include <algorithm>

namespace mtrain::train {

using parallel::GroupKind;

FlatIntervals GradRegion::owned() const {
  FlatIntervals out;
  for (const parallel::Interval& iv : buckets.owned(rank)) out.emplace_back(begin + iv.begin, begin + iv.end);
  return out;
}

GroupKind dense_grad_group(const parallel::ProcessGrid& grid) {
  // With CP = 1 both name the same ranks; "dp" keeps the communicator (and
  // what the profiler and the step record see) as it always was.
  return grid.cp() > 1 ? GroupKind::kDataContext : GroupKind::kData;
}

std::vector<GradRegion> grad_regions(const model::ParamStore& ps, const parallel::ProcessGrid& grid, int rank,
                                     int64_t bucket_elems) {
  auto region = [&](int64_t begin, int64_t end, GroupKind group, GroupKind norm_group) {
    GradRegion r;
    r.begin = begin;
    r.group = group;
    r.norm_group = norm_group;
    r.size = static_cast<int>(grid.group_of(group, rank).size());
    r.rank = grid.rank_in_group(group, rank);
    r.buckets = parallel::GradBuckets(end - begin, bucket_elems, r.size);
    return r;
  };
  std::vector<GradRegion> out;
  out.push_back(region(0, ps.dense_numel(), dense_grad_group(grid), GroupKind::kModel));
  if (ps.has_expert_params()) {
    out.push_back(
        region(ps.expert_begin(), ps.unpadded_numel(), GroupKind::kExpertData, GroupKind::kExpertTensorModelPipeline));
  }
  return out;
}

std::vector<GradRegion> grad_regions(const model::ParamStore& ps, const parallel::ParallelState& state,
                                     int64_t bucket_elems) {
  return grad_regions(ps, state.grid(), state.rank(), bucket_elems);
}

int64_t lay_out_grad_regions(model::ParamStore& ps, const parallel::ProcessGrid& grid, int64_t bucket_elems) {
  ps.layout(static_cast<int64_t>(grid.dp()) * grid.cp());  // the dense group's size
  int64_t end = 0;
  for (const GradRegion& r : grad_regions(ps, grid, 0, bucket_elems)) end = std::max(end, r.padded_end());
  return end;
}

}  // namespace mtrain::train
