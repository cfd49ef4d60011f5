// GradBuckets: the data-parallel gradient reduction of one flat gradient
// buffer, cut into buckets like Megatron's DDP param-and-grad buckets, and
// the shard layout of the distributed optimizer (ZeRO-1) that follows from it.
//
// Layout (elements of the flat buffer, see lib/model/params.h):
//   [0 ............................. numel)[pad)   padded_numel = round_up(numel, dp)
//   [ bucket n-1 ][ ... ][ bucket 1 ][ bucket 0 ]  bucket 0 ends at padded_numel
// Buckets are consecutive, listed from the END of the buffer to the start
// (backward produces gradients roughly in reverse order of offset, so bucket 0
// is complete first), each about bucket_elems long and a multiple of dp_size,
// so every bucket splits into dp_size equal chunks for reduce_scatter /
// all_gather. The padding (< dp_size elements after numel) belongs to bucket
// 0; the caller allocates params and grads with padded_numel() floats and
// keeps the padding zero (no optimizer range covers it, so it stays zero).
//
// Distributed optimizer: DP rank r owns chunk r of every bucket (owned(r)).
// reduce_scatter leaves the DP sum in the owned chunks, the optimizer updates
// only those, all_gather brings every rank's updated chunks to all ranks.
//
// Reductions are plain sums in DP-rank order (Comm's deterministic folds): the
// caller's loss is already normalised over the global batch, so nothing is
// scaled here. Every bucket is < 2^31 elements (MPI int counts).
//
// OverlappedReduction (Megatron's overlap_grad_reduce): the same reductions,
// each bucket started with a non-blocking collective as soon as backward has
// produced all of its gradients, and waited for at the end of backward.
// Each start is marked by a profiler region kStartGradReduce (index: the
// bucket), so a step record knows where in backward it began; the requests
// complete (and are reported) in start order.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "parallel/comm.h"

namespace mtrain::parallel {

struct Interval {
  int64_t begin = 0;  // [begin, end) in elements of the flat buffer
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const Interval&) const = default;
};

// The same intervals as (begin, end) pairs: the form lib/optim takes
// (Optimizer's shard, grad_norm_sq_intervals), which does not depend on lib/parallel.
std::vector<std::pair<int64_t, int64_t>> interval_pairs(const std::vector<Interval>& intervals);

class OverlappedReduction;

// Profiler regions (Kind::kOp) that mark where a bucket's non-blocking
// collective starts; the StepRecorder pairs each with the collective's report.
inline constexpr const char* kStartGradReduce = "start_grad_bucket_reduce";
inline constexpr const char* kStartParamGather = "start_param_bucket_gather";

class GradBuckets {
 public:
  // Megatron's default bucket size: max(40000000, 1000000 * dp_size) elements.
  static int64_t default_bucket_elems(int dp_size);
  // Largest bucket: a multiple of dp_size below 2^31.
  static int64_t max_bucket_elems(int dp_size);

  // numel >= 0 elements of the flat buffer; bucket_elems <= 0 selects the
  // default; it is rounded up to a multiple of dp_size and capped at
  // max_bucket_elems. Throws Error(kInternal) for numel < 0 or dp_size < 1.
  GradBuckets(int64_t numel, int64_t bucket_elems, int dp_size);

  int64_t numel() const { return numel_; }
  int64_t padded_numel() const { return padded_numel_; }
  int dp_size() const { return dp_size_; }
  int64_t bucket_elems() const { return bucket_elems_; }  // after rounding and capping
  // Bucket 0 = the end of the buffer; every size a multiple of dp_size.
  const std::vector<Interval>& buckets() const { return buckets_; }

  // Chunk dp_rank of every bucket (bucket size / dp_size each), sorted by
  // begin. Across ranks 0..dp_size-1 they tile [0, padded_numel) exactly once.
  std::vector<Interval> owned(int dp_rank) const;

  // grads (padded_numel) summed over the DP group in place, bucket by bucket.
  void all_reduce(Comm& dp, float* grads, Wire wire = {}) const;
  // Afterwards this rank's owned intervals of grads (padded_numel) hold the
  // DP sum (in place); the rest of the buffer is stale.
  void reduce_scatter(Comm& dp, float* grads, Wire wire = {}) const;
  // Every rank's owned intervals of params (padded_numel) are copied to all
  // ranks (in place): afterwards params are identical on every DP rank.
  void all_gather(Comm& dp, float* params, Wire wire = {}) const;

 private:
  friend class OverlappedReduction;
  friend class OverlappedParamGather;
  void check_comm(const Comm& dp, const char* what) const;

  int64_t numel_ = 0;
  int64_t padded_numel_ = 0;
  int dp_size_ = 1;
  int64_t bucket_elems_ = 0;
  std::vector<Interval> buckets_;
};

// One step's overlapped DP reduction of `grads` (padded_numel floats). The
// buckets, the Comm and the buffer must outlive it. Every DP rank must make
// the same marks in the same order (the same model code does), so the ranks
// start the same collectives in the same order. Destroying it before
// finish() waits for the buckets already started and starts no others.
class OverlappedReduction {
 public:
  // scatter = false: all-reduce each bucket (GradBuckets::all_reduce);
  // true: reduce-scatter it (GradBuckets::reduce_scatter, distributed optimizer).
  OverlappedReduction(const GradBuckets& buckets, Comm& dp, float* grads, bool scatter, Wire wire = {});

  // Gradients [begin, end) of the flat buffer are final for this step.
  // Starts, in bucket order, every bucket whose elements are now all final;
  // the padding after numel() is final from the start (marking it is
  // ignored). Marking an element of [0, numel) twice, a range outside
  // [0, padded_numel), or any mark after finish() is a caller bug:
  // Error(kInternal). Also lets the buckets in flight make progress.
  void mark_ready(int64_t begin, int64_t end);
  // Starts the buckets not started yet, in bucket order, then waits for all
  // of them. Afterwards grads are bit-identical to what GradBuckets::all_reduce
  // / reduce_scatter would have produced. Idempotent.
  void finish();

  int buckets_started_early() const { return started_early_; }  // by mark_ready, before finish()
  int buckets_started() const { return started_; }
  bool finished() const { return finished_; }

 private:
  void start(size_t bucket);
  void progress();
  void mark_once(int64_t begin, int64_t end);

  const GradBuckets& buckets_;
  Comm& dp_;
  float* grads_;
  bool scatter_;
  Wire wire_;
  std::vector<int64_t> outstanding_;         // (buckets) elements not yet marked
  std::vector<CollectiveRequest> requests_;  // (buckets) default (complete) until started
  std::vector<bool> is_started_;             // (buckets)
  std::vector<size_t> start_order_;          // bucket indices as started
  size_t completed_ = 0;                     // of start_order_, completed in that order
  std::vector<size_t> ready_;                // buckets completed by the current mark
  std::map<int64_t, int64_t> marked_;        // begin -> end of the marked ranges, merged when adjacent
  int started_ = 0;
  int started_early_ = 0;
  bool finished_ = false;
};

}  // namespace mtrain::parallel
