#include "train/grad_sync.h"

#include <algorithm>

#include "optim/grad_clip.h"
#include "optim/loss_scaler.h"
#include "profiler/kernel_region.h"
#include "tensor/precision.h"

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

// ptr + offset, or nullptr for a shape-only step's buffer.
template <class T>
static T* at(T* ptr, int64_t offset) {
  return ptr ? ptr + offset : nullptr;
}

static bool any_replicated(const std::vector<GradRegion>& regions) {
  return std::any_of(regions.begin(), regions.end(), [](const GradRegion& r) { return r.size > 1; });
}

Intervals GradSync::optimizer_shard(const model::ParamStore& ps, const parallel::ParallelState& state,
                                    bool distributed_optimizer, int64_t bucket_elems) {
  Intervals out;
  const std::vector<GradRegion> regions = grad_regions(ps, state, bucket_elems);
  if (!distributed_optimizer || !any_replicated(regions)) return out;
  for (const GradRegion& r : regions) {
    const Intervals owned = r.owned();
    out.insert(out.end(), owned.begin(), owned.end());
  }
  return out;
}

GradSync::GradSync(const model::ParamStore& ps, parallel::ParallelState& state, bool distributed_optimizer,
                   int64_t bucket_elems, bool overlap, bool overlap_param_gather, parallel::Wire param_wire,
                   DType grad_dtype)
    : state_(state),
      param_wire_(param_wire),
      grad_dtype_(grad_dtype),
      grad_wire_(grad_dtype == DType::kF32 ? parallel::Wire{} : parallel::Wire::of(grad_dtype)),
      regions_(grad_regions(ps, state, bucket_elems)),
      distributed_(distributed_optimizer && any_replicated(regions_)),
      overlap_enabled_(overlap && any_replicated(regions_)),
      overlap_param_gather_(overlap_param_gather && distributed_) {
  updated_ = optimizer_shard(ps, state, distributed_, bucket_elems);
  if (!distributed_) updated_.emplace_back(0, ps.numel());
  Intervals counted;
  for (const model::ParamInfo& p : ps.infos()) {
    if (!p.trainable) continue;  // frozen: no gradient
    const std::pair<int64_t, int64_t> iv{p.offset, p.offset + p.numel};
    if (p.sequence_parallel_grad) sp_params_.push_back(iv);
    if (p.shared_embedding && state.grid().pp() > 1) shared_embedding_.push_back(iv);
    if (p.counts_in_norm) counted.push_back(iv);
  }
  std::sort(counted.begin(), counted.end());
  norm_intervals_ = intersect(counted, updated_);
  for (const GradRegion& r : regions_) {
    region_norm_intervals_.push_back(intersect(norm_intervals_, {{r.begin, r.padded_end()}}));
    if (r.size > 1)
      for (const auto& iv : intersect(updated_, {{r.begin, r.padded_end()}})) dp_summed_.push_back(iv);
  }
  // The norm pass as the device model sees it: what TP rank 0 of this stage
  // reads. A TP rank > 0 also skips the TP-replicated tensors (norm weights,
  // a few thousand elements), but a dry run simulates one rank per stage and
  // its record must equal every TP rank's.
  Intervals tp0;
  for (const model::ParamInfo& p : ps.infos())
    if (p.counts_in_norm || !p.shared_embedding) tp0.emplace_back(p.offset, p.offset + p.numel);
  std::sort(tp0.begin(), tp0.end());
  norm_pass_elems_ = total(intersect(tp0, updated_));
}

void GradSync::begin_overlap(float* grads) {
  if (!overlap_enabled_) return;
  for (size_t i = 0; i < regions_.size(); ++i) {
    const GradRegion& r = regions_[i];
    if (r.size == 1) continue;
    overlaps_.emplace_back(i, std::make_unique<parallel::OverlappedReduction>(r.buckets, comm(r), at(grads, r.begin),
                                                                              distributed_, grad_wire_));
  }
}

void GradSync::mark_ready(int64_t begin, int64_t end) {
  for (auto& [i, overlap] : overlaps_) {  // the part in each region, in its coordinates
    const GradRegion& r = regions_[i];
    const int64_t lo = std::max(begin, r.begin), hi = std::min(end, r.end());
    if (lo < hi) overlap->mark_ready(lo - r.begin, hi - r.begin);
  }
}

void GradSync::reduce(float* grads) {
  if (!overlaps_.empty()) {
    started_early_ = 0;
    for (auto& [i, overlap] : overlaps_) {
      started_early_ += overlap->buckets_started_early();
      overlap->finish();
    }
    overlaps_.clear();
  } else {
    for (const GradRegion& r : regions_) {
      if (r.size == 1) continue;
      if (distributed_) {
        r.buckets.reduce_scatter(comm(r), at(grads, r.begin), grad_wire_);
      } else {
        r.buckets.all_reduce(comm(r), at(grads, r.begin), grad_wire_);
      }
    }
  }
  round_sums(grads, dp_summed_);
  // After the DP sum, as Megatron does; with the distributed optimizer only
  // this rank's shard of these tensors is meaningful, and the TP / embedding
  // peers hold the same shard (same DP rank), so the sums stay exact.
  reduce_sequence_parallel(grads);
  reduce_shared_embedding(grads);
}

void GradSync::round_sums(float* grads, const Intervals& list) const {
  if (grad_dtype_ == DType::kF32 || profiler::shape_only()) return;
  for (const auto& [b, e] : list) kernels::round_to_dtype(grads + b, e - b, grad_dtype_);
}

// Packs the listed gradients into one buffer, sums it over `comm`, unpacks.
static void all_reduce_packed(parallel::Comm& comm, float* grads, const Intervals& list, std::vector<float>& pack,
                              parallel::Wire wire) {
  if (profiler::shape_only()) {  // a dry run's step: the same call, no data
    comm.all_reduce_sum(static_cast<float*>(nullptr), total(list), wire);
    return;
  }
  pack.resize(total(list));
  float* p = pack.data();
  for (const auto& [b, e] : list) p = std::copy(grads + b, grads + e, p);
  comm.all_reduce_sum(pack.data(), static_cast<int64_t>(pack.size()), wire);
  const float* q = pack.data();
  for (const auto& [b, e] : list) {
    std::copy(q, q + (e - b), grads + b);
    q += e - b;
  }
}

void GradSync::reduce_sequence_parallel(float* grads) {
  if (sp_params_.empty() || state_.grid().tp() == 1) return;
  all_reduce_packed(state_.tp(), grads, sp_params_, pack_, grad_wire_);
  round_sums(grads, sp_params_);
}

void GradSync::reduce_shared_embedding(float* grads) {
  if (shared_embedding_.empty()) return;
  all_reduce_packed(state_.group(parallel::GroupKind::kEmbedding), grads, shared_embedding_, pack_, grad_wire_);
  round_sums(grads, shared_embedding_);
}

bool GradSync::unscale_and_check(float* grads, float inv_scale) {
  const int32_t inf = optim::unscale_and_find_inf(grads, updated_, inv_scale) ? 1 : 0;
  return state_.world().all_reduce_value(inf, parallel::ReduceOp::kMax) != 0;
}

double GradSync::grad_norm(const float* grads) {
  // Sharded: every rank's shards of every region tile the model once, so one
  // sum over the world. Replicated: each region summed over the ranks that
  // hold distinct parts of it (Megatron's chained optimizer adds the squares
  // of the dense and the expert norms).
  std::vector<double> sq(distributed_ ? 1 : regions_.size(), 0.0);  // stays 0 in a dry run's step
  {
    profiler::Scope kernel(optim::grad_norm_region(norm_pass_elems_));
    if (distributed_) {
      sq[0] = optim::grad_norm_sq_intervals(grads, norm_intervals_);
    } else {
      for (size_t i = 0; i < regions_.size(); ++i)
        sq[i] = optim::grad_norm_sq_intervals(grads, region_norm_intervals_[i]);
    }
  }
  double total_sq = 0;
  for (size_t i = 0; i < sq.size(); ++i) {
    parallel::Comm& group = distributed_ ? state_.world() : state_.group(regions_[i].norm_group);
    group.all_reduce(&sq[i], 1, parallel::ReduceOp::kSum);
    total_sq += sq[i];
  }
  return optim::grad_norm_from_sq(total_sq);
}

double GradSync::params_norm(const float* params) {
  double sq = optim::grad_norm_sq_intervals(params, norm_intervals_);
  parallel::Comm& group = distributed_ ? state_.world() : state_.model();
  group.all_reduce(&sq, 1, parallel::ReduceOp::kSum);
  return optim::grad_norm_from_sq(sq);
}

int64_t GradSync::count_zeros(const float* grads) {
  int64_t zeros = 0;
  if (!profiler::shape_only())  // a dry run's step has no data: the same sum, over nothing
    for (const auto& [b, e] : norm_intervals_)
      for (int64_t i = b; i < e; ++i) zeros += grads[i] == 0.0f;
  double total_zeros = static_cast<double>(zeros);  // exact below 2^53
  parallel::Comm& group = distributed_ ? state_.world() : state_.model();
  group.all_reduce(&total_zeros, 1, parallel::ReduceOp::kSum);
  return static_cast<int64_t>(total_zeros);
}

void GradSync::gather_params(float* params) {
  if (!distributed_) return;
  finish_param_gather();
  for (size_t i = 0; i < regions_.size(); ++i) {
    const GradRegion& r = regions_[i];
    if (r.size == 1) continue;
    if (overlap_param_gather_) {
      param_gathers_.emplace_back(
          i, std::make_unique<parallel::OverlappedParamGather>(r.buckets, comm(r), at(params, r.begin), param_wire_));
    } else {
      r.buckets.all_gather(comm(r), at(params, r.begin), param_wire_);
    }
  }
}

void GradSync::wait_params(int64_t begin, int64_t end) {
  for (auto& [i, gather] : param_gathers_) {
    const GradRegion& r = regions_[i];
    const int64_t lo = std::max(begin, r.begin), hi = std::min(end, r.padded_end());
    if (lo < hi) gather->wait_for(lo - r.begin, hi - r.begin);
  }
  if (std::all_of(param_gathers_.begin(), param_gathers_.end(), [](const auto& g) { return g.second->finished(); }))
    param_gathers_.clear();
}

void GradSync::finish_param_gather() {
  for (auto& [i, gather] : param_gathers_) gather->finish();
  param_gathers_.clear();
}

}  // namespace mtrain::train
