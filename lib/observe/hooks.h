// Step hooks: the public seam by which the logger, the checkpointer, the
// profiler and the precision dumper attach to the training loop without
// touching it. A hook overrides only what it needs. Hooks run on every rank in
// registration order; they must not throw on the hot path except to stop
// training (the exception propagates out of Trainer::train).
//
// Order of calls in one iteration N (one rank):
//   on_step_begin(N)
//     region iteration N
//       region forward_step / backward_step (one per micro-batch and model chunk,
//         in the pipeline schedule's order), each holding modules > ops > kernels
//       region grad_sync, region optimizer_step
//     on_comm(...) after every collective / p2p transfer, wherever it happens
//   on_step_end(metrics)  [on_eval_end(...) every --eval_interval]  on_iteration_end(N)
// Regions (profiler/probe.h) reach only hooks whose region_depth() covers
// their kind; asked again at every step, so a hook can want them for some
// steps only; evaluation and saves run unobserved. Nobody asking costs a
// branch per region.
// docs/HOOKS.md shows a complete hook.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "parallel/comm.h"
#include "profiler/probe.h"

namespace mtrain::observe {

// Communication of one step on this rank, per group ("tp", "pp", "dp", ...).
struct CommTotals {
  int64_t calls = 0;
  int64_t bytes = 0;   // wire bytes sent or reduced (CommEvent::bytes + recv_bytes)
  double seconds = 0;  // wall time inside the calls (includes waiting for peers)
};

// What one optimizer step did; handed to on_step_end.
struct StepMetrics {
  int64_t iteration = 0;  // 1-based, after this step
  int64_t train_iters = 0;
  int64_t consumed_samples = 0;  // after this step
  int64_t global_batch_size = 0;
  int64_t loss_tokens = 0;  // tokens that carried loss in this global batch
  int64_t tokens = 0;       // tokens processed (incl. padding) in this global batch
  double lm_loss = 0;       // mean loss per loss token over the global batch
  double learning_rate = 0;
  double grad_norm = 0;       // before clipping
  bool has_grad_norm = true;  // false when an fp16 overflow skipped the step (Megatron logs none)
  double loss_scale = 1;
  // --log_params_norm: the trainable parameters' L2 norm after the step;
  // --log_num_zeros_in_grad: zeros among the step's (unscaled) gradients,
  // none when an fp16 overflow skipped the step (Megatron logs none).
  bool has_params_norm = false;
  double params_norm = 0;
  bool has_num_zeros = false;
  int64_t num_zeros = 0;
  double elapsed_ms = 0;           // wall time of this step
  bool skipped = false;            // optimizer step skipped (fp16 overflow or non-finite skip)
  int64_t skipped_iterations = 0;  // running totals
  int64_t nan_iterations = 0;
  int grad_buckets_overlapped = 0;  // DP buckets whose reduction started during backward
  CommTotals comm;                  // this rank, all groups
  // MoE router losses of this iteration under Megatron's names, reduced as
  // its MoE metrics tracker does (moe::RouterLossTracker::report); empty
  // without MoE layers.
  std::vector<std::pair<std::string, double>> aux_losses;
  std::map<std::string, CommTotals> comm_by_group;  // this rank, per group
};

struct EvalMetrics {
  int64_t iteration = 0;
  double lm_loss = 0;
  bool end_of_training = false;  // Megatron's final "iteration N on validation set" evaluation
};

struct TrainInfo {
  int64_t start_iteration = 0;
  int64_t train_iters = 0;
  int64_t num_params = 0;
  std::string model_description;
};

class TrainHook {
 public:
  virtual ~TrainHook() = default;
  virtual void on_train_begin(const TrainInfo&) {}
  virtual void on_step_begin(int64_t /*iteration*/) {}
  virtual void on_step_end(const StepMetrics&) {}
  virtual void on_eval_end(const EvalMetrics&) {}
  // The iteration is over: step, logging and its evaluation (if any) are
  // done. The checkpointer saves here, in Megatron's order.
  virtual void on_iteration_end(int64_t /*iteration*/) {}
  // Whether on_iteration_end(iteration) reads the weights (a checkpoint
  // save): the trainer then finishes an overlapped parameter gather first.
  virtual bool reads_params(int64_t /*iteration*/) const { return false; }
  // Every collective and point-to-point transfer of this rank, as it completes
  // (bytes, group, time): for the profiler and the cost model.
  virtual void on_comm(const parallel::CommEvent&) {}
  virtual void on_train_end(const TrainInfo&) {}

  // Regions of the coming step `iteration`: the deepest kind this hook wants
  // (nullopt: none), and whether it reads the tensors at region edges.
  virtual std::optional<profiler::Kind> region_depth(int64_t /*iteration*/) const { return std::nullopt; }
  virtual bool region_tensors(int64_t /*iteration*/) const { return false; }
  // A region opens / closes; `tensors` are its inputs / outputs (for a
  // backward region: incoming / outgoing gradients), valid during the call.
  virtual void on_region_begin(const profiler::Region&, std::span<const profiler::TensorRef>) {}
  virtual void on_region_end(const profiler::Region&, std::span<const profiler::TensorRef>) {}
};

// The hooks of one rank. While some hook wants regions, the list is its
// thread's probe listener (profiler/probe.h) and hands each region to the
// hooks whose depth covers it.
class HookList : public profiler::Listener {
 public:
  HookList() = default;
  HookList(const HookList&) = delete;
  HookList& operator=(const HookList&) = delete;
  ~HookList() override { stop_listening(); }

  void add(std::shared_ptr<TrainHook> h) {
    hooks_.push_back(std::move(h));
    depth_.push_back(-1);
  }
  void train_begin(const TrainInfo& i) {
    for (auto& h : hooks_) h->on_train_begin(i);
  }
  void step_begin(int64_t it);
  // The iteration's regions are over: evaluation and saving run unobserved.
  // Raises what a hook threw from a region closed by a destructor.
  void step_end(const StepMetrics& m) {
    stop_listening();
    profiler::rethrow_pending();
    for (auto& h : hooks_) h->on_step_end(m);
  }
  void eval_end(const EvalMetrics& m) {
    for (auto& h : hooks_) h->on_eval_end(m);
  }
  bool reads_params(int64_t it) const {
    for (const auto& h : hooks_)
      if (h->reads_params(it)) return true;
    return false;
  }
  void iteration_end(int64_t it) {
    for (auto& h : hooks_) h->on_iteration_end(it);
  }
  void comm(const parallel::CommEvent& e) {
    for (auto& h : hooks_) h->on_comm(e);
  }
  void train_end(const TrainInfo& i);

  void begin(const profiler::Region& r, std::span<const profiler::TensorRef> t) override;
  void end(const profiler::Region& r, std::span<const profiler::TensorRef> t) override;

 private:
  void stop_listening();

  std::vector<std::shared_ptr<TrainHook>> hooks_;
  std::vector<int> depth_;  // per hook: the deepest region kind it wants this step, -1: none
  bool listening_ = false;
};

}  // namespace mtrain::observe
