#include "model/params.h"

#include <cmath>
#include <functional>

#include "common/errors.h"
#include "common/rng.h"
#include "tensor/precision.h"

namespace mtrain::model {

int ParamStore::add(std::string name, Shape shape, bool weight_decay, Init init) {
  ParamInfo p;
  p.name = std::move(name);
  p.numel = shape_numel(shape);
  p.shape = std::move(shape);
  // Keep every parameter 16-float aligned so vector loops never straddle two.
  p.offset = (total_ + 15) / 16 * 16;
  p.weight_decay = weight_decay;
  p.init = init;
  total_ = p.offset + p.numel;
  infos_.push_back(std::move(p));
  return static_cast<int>(infos_.size()) - 1;
}

void ParamStore::finalize(device::Device& dev, DType dtype, bool meta) {
  params_ = Tensor(dev, {total_}, dtype, device::MemCategory::kWeights, "model parameters", meta);
  grads_ = Tensor(dev, {total_}, DType::kF32, device::MemCategory::kGrads, "gradient buffer (fp32 main grads)", meta);
}

static uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a, stable across platforms
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

void ParamStore::initialize(uint64_t seed, float std, int64_t num_layers, DType dtype) {
  if (params_.is_meta()) return;
  params_.zero();
  // Megatron: output projections (linear_proj, linear_fc2) use std / sqrt(2 * num_layers).
  const float scaled = std / std::sqrt(2.0f * static_cast<float>(num_layers));
  for (int i = 0; i < static_cast<int>(infos_.size()); ++i) {
    const ParamInfo& p = infos_[i];
    float* w = param(i);
    if (p.init == Init::kOnes) {
      for (int64_t j = 0; j < p.numel; ++j) w[j] = 1.0f;
    } else if (p.init == Init::kNormal || p.init == Init::kScaledNormal) {
      Rng rng(stream_seed(seed, name_hash(p.name)));
      const float s = p.init == Init::kNormal ? std : scaled;
      for (int64_t j = 0; j < p.numel; ++j) w[j] = static_cast<float>(rng.normal()) * s;
    }
  }
  kernels::round_to_dtype(params_.data(), total_, dtype);
}

int ParamStore::find(const std::string& name) const {
  for (int i = 0; i < static_cast<int>(infos_.size()); ++i)
    if (infos_[i].name == name) return i;
  return -1;
}

}  // namespace mtrain::model
