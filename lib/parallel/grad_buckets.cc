#include "parallel/grad_buckets.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <limits>
#include <string>

#include "common/errors.h"
#include "profiler/probe.h"

namespace mtrain::parallel {

namespace {

// ptr + offset, or nullptr for a shape-only (MetaComm) buffer.
template <class T>
T* at(T* ptr, int64_t offset) {
  return ptr ? ptr + offset : nullptr;
}

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

}  // namespace

std::vector<std::pair<int64_t, int64_t>> interval_pairs(const std::vector<Interval>& intervals) {
  std::vector<std::pair<int64_t, int64_t>> out;
  out.reserve(intervals.size());
  for (const Interval& iv : intervals) out.emplace_back(iv.begin, iv.end);
  return out;
}

int64_t GradBuckets::default_bucket_elems(int dp_size) {
  return std::max<int64_t>(40000000, int64_t{1000000} * dp_size);
}

int64_t GradBuckets::max_bucket_elems(int dp_size) {
  const int64_t limit = std::numeric_limits<int32_t>::max();  // 2^31 - 1
  return limit / dp_size * dp_size;
}

GradBuckets::GradBuckets(int64_t numel, int64_t bucket_elems, int dp_size) : numel_(numel), dp_size_(dp_size) {
  if (dp_size < 1) {
    throw Error(ExitCode::kInternal, "grad buckets: data-parallel size must be >= 1, got " + std::to_string(dp_size));
  }
  if (numel < 0) throw Error(ExitCode::kInternal, "grad buckets: negative buffer size " + std::to_string(numel));
  if (bucket_elems <= 0) bucket_elems = default_bucket_elems(dp_size);
  bucket_elems_ = std::min(round_up(bucket_elems, dp_size), max_bucket_elems(dp_size));
  padded_numel_ = round_up(numel, dp_size);
  for (int64_t end = padded_numel_; end > 0;) {
    const int64_t begin = std::max<int64_t>(0, end - bucket_elems_);
    buckets_.push_back({begin, end});
    end = begin;
  }
}

std::vector<Interval> GradBuckets::owned(int dp_rank) const {
  if (dp_rank < 0 || dp_rank >= dp_size_) {
    throw Error(ExitCode::kInternal, "grad buckets: data-parallel rank " + std::to_string(dp_rank) +
                                         " out of range [0, " + std::to_string(dp_size_) + ")");
  }
  std::vector<Interval> out;
  out.reserve(buckets_.size());
  for (auto it = buckets_.rbegin(); it != buckets_.rend(); ++it) {  // ascending offsets
    const int64_t chunk = it->size() / dp_size_;
    out.push_back({it->begin + dp_rank * chunk, it->begin + (dp_rank + 1) * chunk});
  }
  return out;
}

void GradBuckets::check_comm(const Comm& dp, const char* what) const {
  if (dp.size() != dp_size_) {
    throw Error(ExitCode::kInternal, std::string("grad buckets: ") + what + " on group '" + dp.name() + "' of size " +
                                         std::to_string(dp.size()) + ", but the buckets were cut for " +
                                         std::to_string(dp_size_) + " data-parallel ranks");
  }
}

void GradBuckets::all_reduce(Comm& dp, float* grads, Wire wire) const {
  check_comm(dp, "all_reduce");
  for (const Interval& b : buckets_) dp.all_reduce_sum(at(grads, b.begin), b.size(), wire);
}

void GradBuckets::reduce_scatter(Comm& dp, float* grads, Wire wire) const {
  check_comm(dp, "reduce_scatter");
  for (const Interval& b : buckets_) {
    const int64_t chunk = b.size() / dp_size_;
    // The output is this rank's shard view of the input (Comm allows the alias).
    dp.reduce_scatter(at(grads, b.begin), at(grads, b.begin + dp.rank() * chunk), chunk, ReduceOp::kSum, wire);
  }
}

void GradBuckets::all_gather(Comm& dp, float* params, Wire wire) const {
  check_comm(dp, "all_gather");
  for (const Interval& b : buckets_) {
    const int64_t chunk = b.size() / dp_size_;
    const float* shard = at(static_cast<const float*>(params), b.begin + dp.rank() * chunk);
    dp.all_gather(shard, at(params, b.begin), chunk, wire);
  }
}

// --- OverlappedReduction ----------------------------------------------------

OverlappedReduction::OverlappedReduction(const GradBuckets& buckets, Comm& dp, float* grads, bool scatter, Wire wire)
    : buckets_(buckets),
      dp_(dp),
      grads_(grads),
      scatter_(scatter),
      wire_(wire),
      requests_(buckets.buckets().size()),
      is_started_(buckets.buckets().size(), false) {
  buckets.check_comm(dp, scatter ? "overlapped reduce_scatter" : "overlapped all_reduce");
  outstanding_.reserve(buckets.buckets().size());
  for (const Interval& b : buckets.buckets()) outstanding_.push_back(std::min(b.end, buckets.numel()) - b.begin);
}

// Adds [begin, end) to the marked ranges, or throws if part of it is marked already.
void OverlappedReduction::mark_once(int64_t begin, int64_t end) {
  auto twice = [&](const std::pair<const int64_t, int64_t>& old) {
    return Error(ExitCode::kInternal, fmt::format("overlapped grad reduction: [{}, {}) marked ready twice (it "
                                                  "overlaps [{}, {}), marked before)",
                                                  begin, end, old.first, old.second));
  };
  auto next = marked_.upper_bound(begin);  // the first range starting after begin
  if (next != marked_.end() && next->first < end) throw twice(*next);
  if (next != marked_.begin()) {
    auto prev = std::prev(next);
    if (prev->second > begin) throw twice(*prev);
    if (prev->second == begin) {  // merge with the range just before
      begin = prev->first;
      marked_.erase(prev);
    }
  }
  if (next != marked_.end() && next->first == end) {  // merge with the range just after
    end = next->second;
    marked_.erase(next);
  }
  marked_[begin] = end;
}

void OverlappedReduction::mark_ready(int64_t begin, int64_t end) {
  if (finished_) throw Error(ExitCode::kInternal, "overlapped grad reduction: mark_ready after finish()");
  if (begin < 0 || begin > end || end > buckets_.padded_numel()) {
    throw Error(ExitCode::kInternal, fmt::format("overlapped grad reduction: mark_ready [{}, {}) outside [0, {})",
                                                 begin, end, buckets_.padded_numel()));
  }
  end = std::min(end, buckets_.numel());  // the padding is final from the start
  progress();
  if (begin >= end) return;
  mark_once(begin, end);
  // Buckets run from the end of the buffer: bucket k covers lower offsets than bucket k - 1.
  const std::vector<Interval>& all = buckets_.buckets();
  ready_.clear();
  for (size_t k = 0; k < all.size(); ++k) {
    const int64_t lo = std::max(begin, all[k].begin), hi = std::min(end, all[k].end);
    if (lo >= hi) continue;
    outstanding_[k] -= hi - lo;
    if (outstanding_[k] == 0) ready_.push_back(k);
  }
  for (size_t k : ready_) {
    start(k);
    ++started_early_;
  }
}

// Completes the buckets in flight in start order, so every rank (and the
// shape-only step) reports them in the same order.
void OverlappedReduction::progress() {
  while (completed_ < start_order_.size() && requests_[start_order_[completed_]].done()) ++completed_;
}

void OverlappedReduction::start(size_t k) {
  profiler::Scope mark({profiler::Kind::kOp, profiler::Pass::kNone, kStartGradReduce, static_cast<int64_t>(k)});
  const Interval& b = buckets_.buckets()[k];
  float* bucket = at(grads_, b.begin);
  if (scatter_) {
    const int64_t chunk = b.size() / buckets_.dp_size();
    requests_[k] = dp_.start_reduce_scatter_sum(bucket, at(grads_, b.begin + dp_.rank() * chunk), chunk, wire_);
  } else {
    requests_[k] = dp_.start_all_reduce_sum(bucket, b.size(), wire_);
  }
  is_started_[k] = true;
  start_order_.push_back(k);
  ++started_;
}

void OverlappedReduction::finish() {
  if (finished_) return;
  finished_ = true;
  for (size_t k = 0; k < requests_.size(); ++k) {
    if (!is_started_[k]) start(k);
  }
  for (; completed_ < start_order_.size(); ++completed_) requests_[start_order_[completed_]].wait();
}

}  // namespace mtrain::parallel
