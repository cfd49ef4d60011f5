// ParamStore: every model parameter lives in one flat buffer, and every
// gradient in a second flat buffer with the same layout, like Megatron's
// param-and-grad buffer. One flat buffer makes the optimizer one fused pass,
// the grad norm one reduction, and (later) DP all-reduce a few big buckets.
// Names follow Megatron-core's state-dict keys so checkpoints and HF export
// can map them.
//
// Frozen parameters (a LoRA job's base weights) have no gradient and no
// optimizer state: finalize() lays the trainable parameters out first, so
// the flat gradient buffer, the optimizer and the DP buckets span only
// [0, numel()), and the frozen weights follow them in the parameter buffer.
//
// Expert-parallel parameters (ParamInfo::expert_parallel) are reduced over
// another data-parallel group than the others (Megatron keeps them in a
// buffer of their own), so layout() places them after the dense ones:
//   [dense trainable)[DP padding, gap)[expert trainable)[padding)[frozen)[fp32 buffers)
//   0        dense_numel()          expert_begin()    unpadded_numel()     rounded_numel()
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device/device.h"
#include "tensor/tensor.h"

namespace mtrain::model {

// kKaimingUniform: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in the full
// tensor's columns, PyTorch's kaiming_uniform_(a=sqrt(5)) as PEFT initialises lora_A.
enum class Init { kNormal, kScaledNormal, kZeros, kOnes, kKaimingUniform };

// How a tensor is split over the tensor-parallel ranks (Megatron's
// partition_dim). kRows: rank r holds rows [r*R/tp, (r+1)*R/tp) of each of
// `parts` equal row blocks (parts = 2 for SwiGLU's [gate; up] fc1, so every
// rank holds matching gate and up rows); kCols: columns [r*C/tp, ...).
enum class TpSplit { kReplicated, kRows, kCols };
struct TpShard {
  TpSplit split = TpSplit::kReplicated;
  int parts = 1;
  int64_t tp = 1;
  int64_t rank = 0;
};

struct ParamInfo {
  std::string name;    // e.g. "decoder.layers.0.self_attention.linear_qkv.weight"
  Shape shape;         // this rank's shard
  Shape full_shape;    // the whole tensor (= shape without TP)
  int64_t offset = 0;  // into the flat buffers, in elements
  int64_t numel = 0;
  bool weight_decay = true;  // false for norms and biases
  Init init = Init::kNormal;
  TpShard shard;
  // The random stream the values come from: the name, except for the last
  // pipeline stage's copy of tied word embeddings (it starts equal to them).
  std::string init_name;
  // Counted in the gradient norm on this rank: false for a TP-replicated
  // tensor on tp ranks > 0 and for the tied-embedding copy (Megatron counts
  // each parameter once).
  bool counts_in_norm = true;
  // Replicated over TP but fed by a token shard under sequence parallelism
  // (norm weights, row-parallel biases, position embeddings) or by this
  // rank's heads (--qk_layernorm's q/k norm weights, model/qk_norm.h): its
  // gradient is summed over the TP group before the optimizer.
  bool sequence_parallel_grad = false;
  // The last stage's copy of tied word embeddings: its gradient is summed
  // with the first stage's over the embedding group.
  bool shared_embedding = false;
  // False: frozen (no gradient, no optimizer state); grad() is null.
  bool trainable = true;
  // False for a parameter the base model does not have (a LoRA adapter):
  // weight sources (--model, --load of a base) are not asked for it.
  bool in_base = true;
  // Split over the expert-parallel ranks and replicated over the expert
  // grid's data-parallel group (an MoE layer's experts): its gradient is
  // summed over expt-dp instead of dp / dp-cp, the distributed optimizer
  // shards it over expt-dp, and the grad norm counts it once per expert
  // shard. Set it before layout(). Megatron: `param.allreduce = False`.
  bool expert_parallel = false;
  // A persistent buffer, not a parameter (Megatron's register_buffer, e.g.
  // the router's expert_bias): no gradient, not counted as a parameter,
  // saved in checkpoints, and kept in fp32 whatever the model dtype (placed
  // last, outside rounded_numel()). Implies trainable = false.
  bool buffer = false;
};

// The parameter indices of one LoRA adapter's A and B (-1: no adapter).
struct AdapterParams {
  int a = -1, b = -1;
};

class ParamStore {
 public:
  // Registers a parameter of full (unsharded) shape `full_shape`, of which
  // this rank holds `shard`; returns its index. Call finalize() after the last one.
  int add(std::string name, Shape full_shape, bool weight_decay, Init init, TpShard shard = {});
  ParamInfo& mutable_info(int i) { return infos_[i]; }
  // Lays out the trainable parameters first (dense, then expert-parallel at
  // the first 16-aligned offset past a multiple of `dense_multiple` >= the
  // dense ones: room for the dense DP buckets' padding), then the frozen
  // ones (set `trainable` and `expert_parallel` before). Returns the
  // trainable flat size before padding.
  int64_t layout(int64_t dense_multiple = 1);
  // Allocates params (emulated dtype, kWeights: trainable then frozen) and
  // fp32 grads (kGrads, trainable only) on the device; the trainable part is
  // padded to at least `min_numel` elements (the DP buckets' padding); padding
  // is zero and stays zero. Calls layout() if needed.
  // grad_dtype: the gradient buffer's on the device (fp32, or bf16 under --grad_reduce_in_bf16).
  void finalize(device::Device& dev, DType dtype, bool meta, int64_t min_numel = 0, DType grad_dtype = DType::kF32);
  // Deterministic init: element j of parameter i is element j of its own
  // stream seeded by (seed, init_name), so the same tensor comes out whatever
  // else the model holds, and a TP shard holds exactly its slice of it.
  void initialize(uint64_t seed, float std, int64_t num_layers, DType dtype);

  // Parameter i and its gradient (null if it is frozen). A meta store (a dry
  // run) holds no data: both are then a non-null token that is never read, so
  // "null" means "absent" or "frozen" in both modes and a dry run runs and
  // skips exactly the work a real run does (an adapter at offset 0, a frozen
  // weight's gradient GEMM).
  float* param(int i);
  float* grad(int i);
  const ParamInfo& info(int i) const { return infos_[i]; }
  const std::vector<ParamInfo>& infos() const { return infos_; }
  int find(const std::string& name) const;  // -1 if absent

  Tensor& params() { return params_; }
  Tensor& grads() { return grads_; }
  // Trainable flat size incl. alignment and padding: the gradient buffer, the
  // optimizer's span; params() holds numel() + frozen_numel() elements.
  int64_t numel() const { return total_; }
  int64_t frozen_numel() const { return frozen_; }
  // The parameters held in the model dtype: [0, rounded_numel()); the fp32
  // buffers (ParamInfo::buffer) follow.
  int64_t rounded_numel() const { return rounded_; }
  int64_t count() const;            // parameters this rank holds (buffers excluded, as Megatron counts)
  int64_t trainable_count() const;  // of which trainable
  int64_t unpadded_numel() const { return used_; }
  // The dense trainable parameters end here (before padding).
  int64_t dense_numel() const { return dense_end_; }
  // The expert-parallel trainable parameters: [expert_begin(), unpadded_numel()),
  // empty (expert_begin() == unpadded_numel()) when there are none.
  int64_t expert_begin() const { return expert_begin_; }
  bool has_expert_params() const { return expert_begin_ < used_; }

 private:
  std::vector<ParamInfo> infos_;
  int64_t total_ = 0;
  int64_t used_ = 0;
  int64_t frozen_ = 0;   // frozen elements and buffers (with alignment) behind the trainable part
  int64_t rounded_ = 0;  // where the fp32 buffers begin
  int64_t dense_end_ = 0, expert_begin_ = 0;
  bool laid_out_ = false;
  void place_frozen();
  Tensor params_;
  Tensor grads_;
};

}  // namespace mtrain::model
