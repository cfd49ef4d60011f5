// ParamStore: every model parameter lives in one flat buffer, and every
// gradient in a second flat buffer with the same layout, like Megatron's
// param-and-grad buffer. One flat buffer makes the optimizer one fused pass,
// the grad norm one reduction, and (later) DP all-reduce a few big buckets.
// Names follow Megatron-core's state-dict keys so checkpoints and HF export
// can map them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device/device.h"
#include "tensor/tensor.h"

namespace mtrain::model {

enum class Init { kNormal, kScaledNormal, kZeros, kOnes };

struct ParamInfo {
  std::string name;  // e.g. "decoder.layers.0.self_attention.linear_qkv.weight"
  Shape shape;
  int64_t offset = 0;  // into the flat buffers, in elements
  int64_t numel = 0;
  bool weight_decay = true;  // false for norms and biases
  Init init = Init::kNormal;
};

class ParamStore {
 public:
  // Registers a parameter; returns its index. Call finalize() after the last one.
  int add(std::string name, Shape shape, bool weight_decay, Init init);
  // Allocates params (emulated dtype, kWeights) and fp32 grads (kGrads) on the device.
  void finalize(device::Device& dev, DType dtype, bool meta);
  // Deterministic init: parameter i is drawn from its own stream seeded by
  // (seed, name), so the same tensor comes out whatever else the model holds.
  void initialize(uint64_t seed, float std, int64_t num_layers, DType dtype);

  float* param(int i) { return params_.data() + infos_[i].offset; }
  float* grad(int i) { return grads_.data() + infos_[i].offset; }
  const ParamInfo& info(int i) const { return infos_[i]; }
  const std::vector<ParamInfo>& infos() const { return infos_; }
  int find(const std::string& name) const;  // -1 if absent

  Tensor& params() { return params_; }
  Tensor& grads() { return grads_; }
  int64_t numel() const { return total_; }

 private:
  std::vector<ParamInfo> infos_;
  int64_t total_ = 0;
  Tensor params_;
  Tensor grads_;
};

}  // namespace mtrain::model
