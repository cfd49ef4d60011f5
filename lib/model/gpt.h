// GptModel: Megatron's GPT family (GPT-2, Llama, Qwen2 shapes) on one
// simulated NPU: embedding -> L decoder layers -> final norm -> LM head ->
// cross-entropy. Parameters live in a ParamStore; activations for one
// micro-batch of up to (micro_batch, seq_length) tokens are allocated once on
// the device at construction (the memory a real run would hold).
//
// Recompute: with --recompute_granularity full, the recomputed layers share
// one activation slot and backward re-runs each such layer's forward from its
// saved input (dropout masks are counter-based, so recomputation is exact).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "model/model_config.h"
#include "model/params.h"
#include "model/transformer_layer.h"

namespace mtrain::model {

class GptModel {
 public:
  GptModel(const ModelConfig& config, device::Device& dev, bool meta = false);

  // Forward over one micro-batch; keeps what backward needs. Per-token losses
  // (B*T, unweighted) are available from losses() afterwards. `seed` selects
  // the dropout masks of this micro-batch; `training` false disables dropout.
  void forward(const TokenBatch& b, uint64_t seed, bool training);
  const float* losses() const { return losses_.data(); }
  // Backward of sum_i dloss[i] * loss_i after the matching forward(); weight
  // gradients accumulate into params().grads(). zero_grads = true (the first
  // micro-batch of a step) first sets every parameter's gradient to zero,
  // each just before its first contribution: the same result as zeroing the
  // whole buffer beforehand, without a separate sweep over it (a layer's
  // slice is zeroed while its GEMMs are about to pull it into cache anyway).
  void backward(const TokenBatch& b, const float* dloss, uint64_t seed, bool training, bool zero_grads = false);
  // Logits (B*T, padded_vocab) of the last forward() (valid until backward()).
  const float* logits() const { return logits_.data(); }

  ParamStore& params() { return params_; }
  const ModelConfig& config() const { return config_; }

 private:
  void build_params();
  // zero_grads support: each layer's parameters are contiguous in the flat
  // buffer; the constructor checks that these ranges plus the embedding,
  // final-norm and output parameters cover every parameter.
  void zero_grad(int param);
  void zero_layer_grads(int64_t layer);
  void check_grad_coverage() const;
  LayerActs& slot_for(int64_t layer) { return slots_[slot_of_[layer]]; }

  ModelConfig config_;
  device::Device& dev_;
  ParamStore params_;
  int wte_ = -1, wpe_ = -1, lnf_w_ = -1, lnf_b_ = -1, out_w_ = -1;
  std::vector<LayerParams> layers_;
  std::vector<std::pair<int, int>> layer_param_span_;  // [first, last] parameter index of each layer
  std::vector<LayerActs> slots_;
  std::vector<int> slot_of_;  // layer -> activation slot; recomputed layers share slot 0
  Workspace ws_;
  Tensor residuals_;                  // (L+1, N, C): input of each layer, then the final hidden state
  Tensor lnf_, lnf_mean_, lnf_rstd_;  // (N, C), (N), (N)
  Tensor logits_;                     // (N, Vp); holds d(logits) after backward with the fused loss
  Tensor ce_stats_;                   // (N, 2) fused cross-entropy max / log-sum-exp
  Tensor ce_scratch_;                 // (N, Vp) log-softmax for the unfused loss
  Tensor losses_;                     // (N)
  Tensor dres_;                       // (N, C) gradient of the residual stream
  Tensor dlnf_;                       // (N, C)
};

}  // namespace mtrain::model
