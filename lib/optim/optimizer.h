// Optimizer over one flat parameter buffer: Megatron's "adam" (AdamW with
// decoupled weight decay) and "sgd" (torch.optim.SGD with momentum).
//
// The model's parameters live in one flat fp32 buffer `params` (P floats)
// with a same-sized flat gradient buffer; ParamRanges name the slices and say
// which get weight decay (Megatron: norm weights and biases do not). Elements
// covered by no range are left untouched.
//
// Precision mirrors Megatron's Float16OptimizerWithFloat16Params: for a bf16 /
// fp16 model the optimizer keeps an fp32 master copy of the parameters, updates
// it, and writes round_to_dtype(master) back into `params`; for an fp32 model
// it updates `params` in place. Bytes per parameter on the device (with the
// model's own params and fp32 grads): fp32 4+4+8 = 16, bf16 2+4+4+8 = 18.
// Optimizer states are accounted as MemCategory::kOptimizer; with meta = true
// they are accounted but hold no data and step() only counts (dry run).
//
// step() is one fused, OpenMP-parallel pass over fixed work segments built at
// construction (then, for a 16-bit model, a second pass copying the master
// into the params): no allocation, and bit-identical results for any thread
// count. Each pass is a kernel region with its FLOPs and bytes (optimizer.cc),
// in a dry run too, so the simulated step time includes the optimizer.
//
// Distributed optimizer (Megatron's --use_distributed_optimizer, ZeRO-1): the
// sharded constructor takes the flat intervals this rank updates (for DP rank
// r: parallel::GradBuckets::owned(r)). The states then cover only shard ∩
// ranges, stored compactly (state_intervals() says which flat elements, in
// order), so kOptimizer bytes drop by 1/DP; step() reads and writes only the
// owned elements, with the same per-element arithmetic as the unsharded
// optimizer, so the owned results are bit-identical to it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "device/device.h"
#include "profiler/probe.h"
#include "tensor/tensor.h"

namespace mtrain::optim {

struct ParamRange {
  std::string name;
  int64_t offset = 0;  // into the flat buffer, in elements
  int64_t numel = 0;
  bool apply_weight_decay = true;
};

struct OptimizerConfig {
  std::string type = "adam";   // adam (= AdamW, as in Megatron) | sgd
  double beta1 = 0.9;          // --adam-beta1
  double beta2 = 0.999;        // --adam-beta2
  double eps = 1e-8;           // --adam-eps
  double weight_decay = 0.01;  // --weight-decay (adam: decoupled; sgd: coupled, added to the grad)
  double sgd_momentum = 0.9;   // --sgd-momentum
};

// [begin, end) intervals of the flat buffer, in elements.
using FlatIntervals = std::vector<std::pair<int64_t, int64_t>>;

class Optimizer {
 public:
  // Throws Error(kInternal) for ranges outside [0, numel) or overlapping,
  // ConfigError for an unknown type, OutOfMemoryError if the states do not fit.
  Optimizer(device::Device& dev, std::vector<ParamRange> ranges, int64_t numel, DType model_dtype, OptimizerConfig cfg,
            bool meta = false);
  // Sharded (distributed optimizer): this rank updates only the elements of
  // `shard` (intervals; any order, non-overlapping; parts at or past numel,
  // e.g. DP padding, are ignored). An empty shard means everything: the same
  // as the constructor above. Throws Error(kInternal) for a negative, reversed
  // or overlapping interval.
  Optimizer(device::Device& dev, std::vector<ParamRange> ranges, int64_t numel, DType model_dtype, OptimizerConfig cfg,
            FlatIntervals shard, bool meta = false);

  // Device bytes of optimizer state (incl. the master copy) for `numel` params.
  static int64_t state_bytes(int64_t numel, DType model_dtype, const OptimizerConfig& cfg);

  // bf16/fp16 models: copy the model's params (P) into the fp32 master (only
  // the owned elements when sharded). Must be called once before the first
  // step. No-op for fp32 models.
  void init_master_from(const float* params);
  // Writes round_to_dtype(master) into params (P; only the owned elements when
  // sharded) and marks the master valid: the way back after a checkpoint
  // wrote the master through state_tensors().
  void sync_params_from_master(float* params);

  // One optimizer step with learning rate `lr`: params (P) updated in place,
  // grads (P, fp32, already unscaled) read only; when sharded only the owned
  // elements are read and written. Each gradient is used as
  // grads[i] * float(grad_scale): pass clip_coefficient(...) here instead of
  // clip_grads() to clip inside this pass (the same float product, so the
  // same bits, without a separate read-modify-write of the gradient buffer).
  void step(float* params, const float* grads, double lr, double grad_scale = 1.0);

  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t n) { step_count_ = n; }  // checkpoint load
  // --use_checkpoint_opt_param_scheduler: the checkpoint's weight decay (read every step).
  void set_weight_decay(double wd) { cfg_.weight_decay = wd; }

  // Named state buffers for checkpointing: exp_avg, exp_avg_sq (adam),
  // momentum_buffer (sgd with momentum), fp32_param (master copy). Each holds
  // state_numel() elements: the flat elements of state_intervals(), in order.
  std::vector<std::pair<std::string, Tensor*>> state_tensors();

  bool sharded() const { return sharded_; }
  // Elements per state buffer: numel (unsharded) or |shard ∩ ranges| (sharded).
  int64_t state_numel() const { return state_numel_; }
  // The flat intervals the state buffers cover, ascending and concatenated:
  // {[0, numel)} unsharded; shard ∩ ranges (adjacent pieces merged) sharded.
  const FlatIntervals& state_intervals() const { return state_intervals_; }

  bool has_master() const { return master_.defined(); }
  const float* master() const { return master_.data(); }  // state_numel() floats
  const std::vector<ParamRange>& ranges() const { return ranges_; }
  int64_t numel() const { return numel_; }
  DType model_dtype() const { return model_dtype_; }
  const OptimizerConfig& config() const { return cfg_; }

 private:
  enum class Kind { kAdam, kSgd };
  // A contiguous work item of one range; the unit of OpenMP scheduling.
  // Flat elements [begin, end) have their states at [state, state + end - begin).
  struct Segment {
    int64_t begin = 0;
    int64_t end = 0;
    int64_t state = 0;
    bool decay = false;
  };

  // The update kernel's region: FLOPs and bytes over the updated elements.
  profiler::Region update_region() const;
  void allocate_states(device::Device& dev);
  void build_segments(const FlatIntervals& shard);
  void adam_step(float* params, const float* grads, double lr, float grad_scale);
  void sgd_step(float* params, const float* grads, double lr, float grad_scale);
  // fp16/bf16: write the updated master slice back into the model's params.
  void publish_segment(float* params, const Segment& s) const;

  std::vector<ParamRange> ranges_;
  std::vector<Segment> segments_;
  int64_t numel_ = 0;
  DType model_dtype_ = DType::kF32;
  OptimizerConfig cfg_;
  Kind kind_ = Kind::kAdam;
  bool meta_ = false;
  bool sharded_ = false;
  bool master_valid_ = false;
  int64_t state_numel_ = 0;
  FlatIntervals state_intervals_;
  int64_t step_count_ = 0;

  Tensor exp_avg_;     // (S) adam first moment; S = state_numel()
  Tensor exp_avg_sq_;  // (S) adam second moment
  Tensor momentum_;    // (S) sgd momentum buffer, only if sgd_momentum != 0
  Tensor master_;      // (S) fp32 master params, only for bf16/fp16 models
};

}  // namespace mtrain::optim
