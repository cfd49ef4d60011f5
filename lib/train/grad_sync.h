// GradSync: everything between the last backward of a step and the optimizer
// step that crosses ranks, in Megatron's order (finalize_model_grads):
//   1. data parallel, per gradient region (grad_regions.h: dense parameters
//      over dp, or dp-cp with CP; expert-parallel ones over expt-dp): the
//      gradient buckets all-reduced (sum: the loss is
//      already normalised over the global batch), or, with the distributed
//      optimizer, reduce-scattered so each DP rank holds the sum of the shard
//      it updates; with --overlap_grad_reduce each bucket starts as soon as
//      backward has finished its gradients (mark_ready) and step 1 only waits;
//   2. sequence-parallel gradients (replicated tensors fed by a token shard:
//      norms, row-parallel biases) summed over the TP group;
//   3. tied word embeddings split over the first and last pipeline stage:
//      their two gradients summed over the embedding group;
// then the fp16 overflow check, the gradient norm (each parameter counted
// once: TP duplicates and the tied copy excluded, summed over the model-
// parallel group (expert parameters: over tp-ep-pp), and over the world
// when the optimizer is sharded), and after
// the optimizer step the all-gather of the updated shards; with
// --overlap_param_gather that gather is only started there, and the next
// forward waits for each bucket as it is about to read it (wait_params).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "model/params.h"
#include "parallel/grad_buckets.h"
#include "parallel/parallel_state.h"
#include "parallel/param_gather.h"
#include "train/grad_regions.h"

namespace mtrain::train {

class GradSync {
 public:
  // bucket_elems <= 0: Megatron's default bucket size. param_wire: the
  // distributed optimizer's parameter all-gather moves the model's 16-bit
  // parameters (Megatron's param buffer), not the fp32 main copy.
  // grad_dtype: the main gradients' (--grad_reduce_in_bf16: bf16); every
  // gradient reduction moves it and each sum is rounded to it.
  GradSync(const model::ParamStore& ps, parallel::ParallelState& state, bool distributed_optimizer,
           int64_t bucket_elems, bool overlap = false, bool overlap_param_gather = false,
           parallel::Wire param_wire = {}, DType grad_dtype = DType::kF32);

  // The shard this rank's optimizer updates (empty: everything), i.e. the
  // updated() of a GradSync built with the same arguments.
  static std::vector<std::pair<int64_t, int64_t>> optimizer_shard(const model::ParamStore& ps,
                                                                  const parallel::ParallelState& state,
                                                                  bool distributed_optimizer, int64_t bucket_elems);

  // Overlap: call before the last micro-batch's backward; then mark_ready
  // for every gradient range backward finishes. No-op without overlap.
  void begin_overlap(float* grads);
  void mark_ready(int64_t begin, int64_t end);
  bool overlapping() const { return !overlaps_.empty(); }
  // Buckets of the last reduce() whose reduction started during backward.
  int buckets_started_early() const { return started_early_; }
  // Steps 1-3 on the flat gradient buffer (ps.numel() floats).
  void reduce(float* grads);
  // The [begin, end) intervals of the flat buffer this rank's optimizer
  // updates (everything, or its distributed-optimizer shard).
  const std::vector<std::pair<int64_t, int64_t>>& updated() const { return updated_; }
  // fp16: unscale and check the updated intervals; the flag is agreed by every rank.
  bool unscale_and_check(float* grads, float inv_scale);
  // The global gradient norm (before clipping), the same on every rank.
  double grad_norm(const float* grads);
  // --log_params_norm: the same norm over the parameters (after the step;
  // this rank's updated shard is current even while a gather is pending).
  double params_norm(const float* params);
  // --log_num_zeros_in_grad: zeros among the gradients grad_norm counts,
  // summed over the same group (Megatron's count_zeros_fp32).
  int64_t count_zeros(const float* grads);
  // After the optimizer step: every rank gets the updated shards (distributed
  // optimizer only). With overlap_param_gather it only starts the gather.
  void gather_params(float* params);
  // Overlapped param gather: params [begin, end) are about to be read.
  void wait_params(int64_t begin, int64_t end);
  // Every parameter is current afterwards (before evaluation, a save, the end).
  void finish_param_gather();
  bool param_gather_pending() const { return !param_gathers_.empty(); }

  bool distributed_optimizer() const { return distributed_; }

 private:
  void reduce_sequence_parallel(float* grads);
  void reduce_shared_embedding(float* grads);

  parallel::Comm& comm(const GradRegion& r) { return state_.group(r.group); }

  parallel::ParallelState& state_;
  parallel::Wire param_wire_;
  DType grad_dtype_;
  parallel::Wire grad_wire_;  // grad_dtype_'s width on every gradient reduction
  // bf16 main grads: rounds the sums in `list` (no-op for fp32 and in a dry run's step).
  void round_sums(float* grads, const FlatIntervals& list) const;
  std::vector<GradRegion> regions_;  // dense, then expert-parallel (if any)
  bool distributed_;
  bool overlap_enabled_;
  // Per region with more than one replica (index into regions_, request).
  std::vector<std::pair<size_t, std::unique_ptr<parallel::OverlappedReduction>>> overlaps_;
  bool overlap_param_gather_;
  std::vector<std::pair<size_t, std::unique_ptr<parallel::OverlappedParamGather>>> param_gathers_;
  int started_early_ = 0;
  std::vector<std::pair<int64_t, int64_t>> updated_;
  std::vector<std::pair<int64_t, int64_t>> sp_params_;         // sequence-parallel gradients
  std::vector<std::pair<int64_t, int64_t>> shared_embedding_;  // tied embedding (first or last stage)
  std::vector<std::pair<int64_t, int64_t>> norm_intervals_;    // counted in the norm, within updated_
  std::vector<FlatIntervals> region_norm_intervals_;           // the same, per region
  FlatIntervals dp_summed_;      // updated_ within the regions reduced over DP (what round_sums rounds after it)
  int64_t norm_pass_elems_ = 0;  // the norm pass's device work (grad_sync.cc)
  std::vector<float> pack_;
};

}  // namespace mtrain::train
