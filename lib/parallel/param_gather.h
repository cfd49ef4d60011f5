// OverlappedParamGather (Megatron's --overlap_param_gather): the distributed
// optimizer's all-gather of the updated parameter shards (GradBuckets::
// all_gather) as one non-blocking collective per bucket, all started right
// after the optimizer step in forward order (the bucket with the lowest
// offsets first: the embedding and the first layers), and each waited for
// only when the next forward is about to read a parameter it holds.
//
// Every start is marked by a profiler region kStartParamGather (index: the
// bucket) for the step record. Requests complete in start order: waiting
// for a bucket also waits for those started before it, so every rank (and a
// shape-only step) reports them alike. The bits equal the blocking
// all_gather's (a copy of each rank's chunk). The buckets, the Comm and the
// buffer must outlive it; destroying it waits for what is still in flight.
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/grad_buckets.h"

namespace mtrain::parallel {

// How many buckets, in the gather's start order, must have arrived before
// params [begin, end) may be read (0: none holds part of it).
size_t param_gather_prefix(const GradBuckets& buckets, int64_t begin, int64_t end);

class OverlappedParamGather {
 public:
  // Starts every bucket's all-gather of params (padded_numel floats; null
  // in a shape-only step).
  OverlappedParamGather(const GradBuckets& buckets, Comm& dp, float* params, Wire wire = {});
  ~OverlappedParamGather();  // waits, in start order, for what is in flight (errors swallowed)
  OverlappedParamGather(const OverlappedParamGather&) = delete;
  OverlappedParamGather& operator=(const OverlappedParamGather&) = delete;

  // params [begin, end) are about to be read: returns once every bucket
  // holding part of it has arrived. Out-of-range parts are ignored.
  void wait_for(int64_t begin, int64_t end);
  // Waits for every bucket. Idempotent.
  void finish();
  bool finished() const { return completed_ == requests_.size(); }

 private:
  const GradBuckets& buckets_;
  std::vector<CollectiveRequest> requests_;  // in start (forward) order: the last bucket first
  size_t completed_ = 0;                     // requests_[0, completed_) have arrived
};

}  // namespace mtrain::parallel
