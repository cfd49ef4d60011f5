#include "parallel/param_gather.h"

#include "profiler/probe.h"

namespace mtrain::parallel {

size_t param_gather_prefix(const GradBuckets& buckets, int64_t begin, int64_t end) {
  const std::vector<Interval>& all = buckets.buckets();
  size_t n = 0;
  for (size_t i = 0; i < all.size(); ++i) {  // i: position in start order
    const Interval& b = all[all.size() - 1 - i];
    if (b.begin < end && begin < b.end) n = i + 1;
  }
  return n;
}

OverlappedParamGather::OverlappedParamGather(const GradBuckets& buckets, Comm& dp, float* params, Wire wire)
    : buckets_(buckets) {
  buckets.check_comm(dp, "overlapped all_gather");
  const std::vector<Interval>& all = buckets.buckets();
  // Buckets are listed from the end of the buffer; the forward reads it from the start.
  requests_.reserve(all.size());
  for (size_t k = all.size(); k-- > 0;) {
    profiler::Scope mark({profiler::Kind::kOp, profiler::Pass::kNone, kStartParamGather, static_cast<int64_t>(k)});
    const int64_t chunk = all[k].size() / buckets.dp_size();
    const float* shard = params ? params + all[k].begin + dp.rank() * chunk : nullptr;
    requests_.push_back(dp.start_all_gather(shard, params ? params + all[k].begin : nullptr, chunk, wire));
  }
}

OverlappedParamGather::~OverlappedParamGather() {
  try {
    finish();
  } catch (...) {  // unwinding after an error that is reported elsewhere
  }
}

void OverlappedParamGather::wait_for(int64_t begin, int64_t end) {
  const size_t last = param_gather_prefix(buckets_, begin, end);
  for (; completed_ < last; ++completed_) requests_[completed_].wait();
}

void OverlappedParamGather::finish() {
  for (; completed_ < requests_.size(); ++completed_) requests_[completed_].wait();
}

}  // namespace mtrain::parallel
