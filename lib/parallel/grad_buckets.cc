#include "parallel/grad_buckets.h"

#include <algorithm>
#include <limits>
#include <string>

#include "common/errors.h"

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

}  // namespace mtrain::parallel
