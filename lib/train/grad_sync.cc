#include "train/grad_sync.h"

#include <algorithm>

#include "optim/grad_clip.h"
#include "optim/loss_scaler.h"
#include "profiler/kernel_region.h"

namespace mtrain::train {

using Intervals = std::vector<std::pair<int64_t, int64_t>>;

namespace {

// a ∩ b for sorted, disjoint interval lists.
Intervals intersect(const Intervals& a, const Intervals& b) {
  Intervals out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (lo < hi) out.emplace_back(lo, hi);
    (a[i].second < b[j].second) ? ++i : ++j;
  }
  return out;
}

int64_t total(const Intervals& v) {
  int64_t n = 0;
  for (const auto& [b, e] : v) n += e - b;
  return n;
}

}  // namespace

parallel::Comm& grad_group(parallel::ParallelState& s) { return s.grid().cp() > 1 ? s.dp_cp() : s.dp(); }

int grad_group_size(const parallel::ParallelState& s) { return s.grid().dp() * s.grid().cp(); }

int grad_group_rank(const parallel::ParallelState& s) {
  return s.grid().rank_in_group(parallel::GroupKind::kDataContext, s.rank());
}

int64_t GradSync::padded_numel(int64_t numel, int64_t bucket_elems, int dp_size) {
  return parallel::GradBuckets(numel, bucket_elems, dp_size).padded_numel();
}

Intervals GradSync::optimizer_shard(const model::ParamStore& ps, const parallel::ParallelState& state,
                                    bool distributed_optimizer, int64_t bucket_elems) {
  Intervals out;
  if (!distributed_optimizer || grad_group_size(state) == 1) return out;
  parallel::GradBuckets buckets(ps.unpadded_numel(), bucket_elems, grad_group_size(state));
  for (const parallel::Interval& iv : buckets.owned(grad_group_rank(state))) out.emplace_back(iv.begin, iv.end);
  return out;
}

GradSync::GradSync(const model::ParamStore& ps, parallel::ParallelState& state, bool distributed_optimizer,
                   int64_t bucket_elems, bool overlap, bool overlap_param_gather)
    : state_(state),
      distributed_(distributed_optimizer && grad_group_size(state) > 1),
      buckets_(ps.unpadded_numel(), bucket_elems, grad_group_size(state)),
      overlap_enabled_(overlap && grad_group_size(state) > 1),
      overlap_param_gather_(overlap_param_gather && distributed_) {
  if (distributed_) {
    for (const parallel::Interval& iv : buckets_.owned(grad_group_rank(state))) updated_.emplace_back(iv.begin, iv.end);
  } else {
    updated_.emplace_back(0, ps.numel());
  }
  Intervals counted;
  for (const model::ParamInfo& p : ps.infos()) {
    if (!p.trainable) continue;  // frozen: no gradient
    const std::pair<int64_t, int64_t> iv{p.offset, p.offset + p.numel};
    if (p.sequence_parallel_grad) sp_params_.push_back(iv);
    if (p.shared_embedding && state.grid().pp() > 1) shared_embedding_.push_back(iv);
    if (p.counts_in_norm) counted.push_back(iv);
  }
  norm_intervals_ = intersect(counted, updated_);
  // The norm pass as the device model sees it: what TP rank 0 of this stage
  // reads. A TP rank > 0 also skips the TP-replicated tensors (norm weights,
  // a few thousand elements), but a dry run simulates one rank per stage and
  // its record must equal every TP rank's.
  Intervals tp0;
  for (const model::ParamInfo& p : ps.infos())
    if (p.counts_in_norm || !p.shared_embedding) tp0.emplace_back(p.offset, p.offset + p.numel);
  norm_pass_elems_ = total(intersect(tp0, updated_));
}

void GradSync::begin_overlap(float* grads) {
  if (overlap_enabled_)
    overlap_ = std::make_unique<parallel::OverlappedReduction>(buckets_, grad_group(state_), grads, distributed_);
}

void GradSync::mark_ready(int64_t begin, int64_t end) {
  if (overlap_) overlap_->mark_ready(begin, end);
}

void GradSync::reduce(float* grads) {
  if (overlap_) {
    started_early_ = overlap_->buckets_started_early();
    overlap_->finish();
    overlap_.reset();
  } else if (grad_group_size(state_) > 1) {
    if (distributed_) {
      buckets_.reduce_scatter(grad_group(state_), grads);
    } else {
      buckets_.all_reduce(grad_group(state_), grads);
    }
  }
  // After the DP sum, as Megatron does; with the distributed optimizer only
  // this rank's shard of these tensors is meaningful, and the TP / embedding
  // peers hold the same shard (same DP rank), so the sums stay exact.
  reduce_sequence_parallel(grads);
  reduce_shared_embedding(grads);
}

// Packs the listed gradients into one buffer, sums it over `comm`, unpacks.
static void all_reduce_packed(parallel::Comm& comm, float* grads, const Intervals& list, std::vector<float>& pack) {
  if (profiler::shape_only()) {  // a dry run's step: the same call, no data
    comm.all_reduce_sum(static_cast<float*>(nullptr), total(list));
    return;
  }
  pack.resize(total(list));
  float* p = pack.data();
  for (const auto& [b, e] : list) p = std::copy(grads + b, grads + e, p);
  comm.all_reduce_sum(pack.data(), static_cast<int64_t>(pack.size()));
  const float* q = pack.data();
  for (const auto& [b, e] : list) {
    std::copy(q, q + (e - b), grads + b);
    q += e - b;
  }
}

void GradSync::reduce_sequence_parallel(float* grads) {
  if (sp_params_.empty() || state_.grid().tp() == 1) return;
  all_reduce_packed(state_.tp(), grads, sp_params_, pack_);
}

void GradSync::reduce_shared_embedding(float* grads) {
  if (shared_embedding_.empty()) return;
  all_reduce_packed(state_.group(parallel::GroupKind::kEmbedding), grads, shared_embedding_, pack_);
}

bool GradSync::unscale_and_check(float* grads, float inv_scale) {
  const int32_t inf = optim::unscale_and_find_inf(grads, updated_, inv_scale) ? 1 : 0;
  return state_.world().all_reduce_value(inf, parallel::ReduceOp::kMax) != 0;
}

double GradSync::grad_norm(const float* grads) {
  double sq = 0;  // stays 0 in a dry run's step
  {
    profiler::Scope kernel(optim::grad_norm_region(norm_pass_elems_));
    sq = optim::grad_norm_sq_intervals(grads, norm_intervals_);
  }
  // Each DP (and CP) replica holds the same gradients unless the optimizer is
  // sharded (then over DP x CP: the world holds each shard once per model rank).
  parallel::Comm& group = distributed_ ? state_.world() : state_.model();
  group.all_reduce(&sq, 1, parallel::ReduceOp::kSum);
  return optim::grad_norm_from_sq(sq);
}

void GradSync::gather_params(float* params) {
  if (!distributed_) return;
  finish_param_gather();
  if (overlap_param_gather_) {
    param_gather_ = std::make_unique<parallel::OverlappedParamGather>(buckets_, grad_group(state_), params);
  } else {
    buckets_.all_gather(grad_group(state_), params);
  }
}

void GradSync::wait_params(int64_t begin, int64_t end) {
  if (!param_gather_) return;
  param_gather_->wait_for(begin, end);
  if (param_gather_->finished()) param_gather_.reset();
}

void GradSync::finish_param_gather() {
  if (!param_gather_) return;
  param_gather_->finish();
  param_gather_.reset();
}

}  // namespace mtrain::train
