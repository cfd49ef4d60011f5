// GradRegions: the data-parallel regions of a ParamStore's flat gradient
// buffer, like the separate param-and-grad buffers of Megatron's DDP:
// - dense parameters, [0, dense_numel()): replicated over the data-parallel
//   ranks and the context-parallel ones, so summed over "dp", or over
//   "dp-cp" when CP > 1 (Megatron's data_parallel_group(with_context_parallel
//   =True): each CP rank saw other tokens of the same sequences);
// - expert-parallel parameters, [expert_begin(), unpadded_numel()): split
//   over EP and replicated over the expert grid's data-parallel group, so
//   summed over "expt-dp" (which spans CP: the expert grid has cp = 1).
// Each region has buckets of its own (in region coordinates) and, with the
// distributed optimizer, is sharded over its own group.
//
// Scaling: none, in either region. The loss is normalised over the global
// batch before backward, so a plain sum gives the global-batch gradient;
// Megatron instead scales both dense and expert gradients by 1/dp_cp_size
// before (or by averaging in) the reduction over their groups
// (distributed_data_parallel.py), the same normalisation in another place.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "model/params.h"
#include "parallel/grad_buckets.h"
#include "parallel/parallel_state.h"

namespace mtrain::train {

using FlatIntervals = std::vector<std::pair<int64_t, int64_t>>;

struct GradRegion {
  int64_t begin = 0;                                             // flat offset of the region
  parallel::GroupKind group = parallel::GroupKind::kData;        // gradients summed over it
  parallel::GroupKind norm_group = parallel::GroupKind::kModel;  // replicas excluded: the norm's sum
  int size = 1, rank = 0;                                        // of `group`, for this rank
  parallel::GradBuckets buckets{0, 0, 1};                        // [0, numel) = flat [begin, begin + numel)
  int64_t end() const { return begin + buckets.numel(); }        // before padding
  int64_t padded_end() const { return begin + buckets.padded_numel(); }
  FlatIntervals owned() const;  // this rank's distributed-optimizer shard, flat
};

// The group dense gradients are summed over: kData, or kDataContext if CP > 1.
parallel::GroupKind dense_grad_group(const parallel::ProcessGrid& grid);

// The regions of `ps` (laid out by lay_out_grad_regions): the dense one,
// then the expert one if `ps` has expert-parallel parameters.
std::vector<GradRegion> grad_regions(const model::ParamStore& ps, const parallel::ParallelState& state,
                                     int64_t bucket_elems);
std::vector<GradRegion> grad_regions(const model::ParamStore& ps, const parallel::ProcessGrid& grid, int rank,
                                     int64_t bucket_elems);

// Lays `ps` out so the dense buckets' padding fits before the expert region
// and returns the flat gradient buffer size the buckets need (the
// `min_numel` of ParamStore::finalize).
int64_t lay_out_grad_regions(model::ParamStore& ps, const parallel::ProcessGrid& grid, int64_t bucket_elems);

}  // namespace mtrain::train
