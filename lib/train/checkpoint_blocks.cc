#include "train/checkpoint_blocks.h"

#include <algorithm>

#include "common/errors.h"
#include "parallel/grad_buckets.h"
#include "train/grad_regions.h"

namespace mtrain::train::detail {

std::vector<ParamBlock> param_blocks(const model::ParamInfo& p) {
  const model::TpShard& s = p.shard;
  ParamBlock whole{std::vector<int64_t>(p.full_shape.size(), 0), p.shape, 0};
  if (s.split == model::TpSplit::kReplicated || s.tp == 1) return {whole};
  if (s.split == model::TpSplit::kCols) {
    whole.offsets.at(1) = s.rank * p.shape.at(1);
    return {whole};
  }
  // kRows: `parts` equal row blocks of the full tensor, each split over TP.
  const int64_t part_rows = p.full_shape.at(0) / s.parts, local_rows = p.shape.at(0) / s.parts;
  const int64_t row_elems = p.shape.at(0) > 0 ? p.numel / p.shape.at(0) : 0;
  std::vector<ParamBlock> out;
  for (int k = 0; k < s.parts; ++k) {
    ParamBlock b = whole;
    b.offsets[0] = k * part_rows + s.rank * local_rows;
    b.shape[0] = local_rows;
    b.local_offset = k * local_rows * row_elems;
    out.push_back(std::move(b));
  }
  return out;
}

bool writes_param(const model::ParamInfo& p, int index, const parallel::RankCoords& rc, int dp_size,
                  const parallel::ExpertRankCoords& ec, int expert_dp_size) {
  if (!saved_under_own_name(p)) return false;
  if (p.expert_parallel)  // a whole tensor (the fc2 bias) under expert TP: written by expert-TP rank 0
    return index % expert_dp_size == ec.dp && (p.shard.split != model::TpSplit::kReplicated || ec.tp == 0);
  if (p.shard.split == model::TpSplit::kReplicated && rc.tp != 0) return false;
  return rc.cp == 0 && index % dp_size == rc.dp;  // CP ranks hold the same weights
}

std::vector<float> full_state(const Tensor& state, const optim::Optimizer& opt, parallel::ParallelState& ps,
                              const model::ParamStore& params, int64_t bucket_elems) {
  const int64_t padded_numel = params.numel();
  std::vector<float> flat(static_cast<size_t>(padded_numel), 0.0f);
  const float* src = state.data();
  for (const auto& [b, e] : opt.state_intervals()) {
    if (e > padded_numel) throw Error(ExitCode::kInternal, "checkpoint: optimizer state past the parameter buffer");
    std::copy_n(src, e - b, flat.data() + b);
    src += e - b;
  }
  if (opt.sharded()) {
    for (const GradRegion& r : grad_regions(params, ps, bucket_elems)) {
      if (r.padded_end() > padded_numel)
        throw Error(ExitCode::kInternal, "checkpoint: DP buckets larger than the parameter buffer");
      if (r.size > 1) r.buckets.all_gather(ps.group(r.group), flat.data() + r.begin);
    }
  }
  return flat;
}

void copy_block(float* out, const std::vector<float>& full, const Shape& full_shape,
                const std::vector<int64_t>& offsets, const Shape& shape) {
  const int64_t cols = full_shape.size() > 1 ? full_shape[1] : 1;
  const int64_t rows = shape.at(0), width = shape.size() > 1 ? shape[1] : 1;
  const int64_t col0 = offsets.size() > 1 ? offsets[1] : 0;
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(full.data() + (offsets.at(0) + r) * cols + col0, width, out + r * width);
}

void take_state(Tensor& state, const optim::Optimizer& opt, const std::vector<float>& flat) {
  float* dst = state.data();
  for (const auto& [b, e] : opt.state_intervals()) dst = std::copy(flat.begin() + b, flat.begin() + e, dst);
}

}  // namespace mtrain::train::detail
