#include "model/params.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "common/errors.h"
#include "common/rng.h"
#include "tensor/precision.h"

namespace mtrain::model {

static Shape shard_shape(const Shape& full, const TpShard& s, const std::string& name) {
  Shape local = full;
  if (s.split == TpSplit::kReplicated || s.tp == 1) return local;
  const size_t dim = s.split == TpSplit::kRows ? 0 : 1;
  const int64_t div = s.tp * (s.split == TpSplit::kRows ? s.parts : 1);
  if (dim >= full.size() || full[dim] % div != 0)
    throw Error(ExitCode::kInternal,
                "ParamStore: " + name + " does not split over " + std::to_string(s.tp) + " tensor-parallel ranks");
  local[dim] = full[dim] / s.tp;
  return local;
}

int ParamStore::add(std::string name, Shape full_shape, bool weight_decay, Init init, TpShard shard) {
  ParamInfo p;
  p.shape = shard_shape(full_shape, shard, name);
  p.init_name = name;
  p.name = std::move(name);
  p.numel = shape_numel(p.shape);
  p.full_shape = std::move(full_shape);
  p.shard = shard;
  // Keep every parameter 16-float aligned so vector loops never straddle two.
  p.offset = (total_ + 15) / 16 * 16;
  p.weight_decay = weight_decay;
  p.init = init;
  total_ = p.offset + p.numel;
  used_ = total_;
  infos_.push_back(std::move(p));
  return static_cast<int>(infos_.size()) - 1;
}

int64_t ParamStore::count() const {
  int64_t n = 0;
  for (const ParamInfo& p : infos_) n += p.numel;
  return n;
}

void ParamStore::finalize(device::Device& dev, DType dtype, bool meta, int64_t min_numel) {
  total_ = std::max(total_, min_numel);
  params_ = Tensor(dev, {total_}, dtype, device::MemCategory::kWeights, "model parameters", meta);
  grads_ = Tensor(dev, {total_}, DType::kF32, device::MemCategory::kGrads, "gradient buffer (fp32 main grads)", meta);
  if (!meta) grads_.zero();
}

static uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a, stable across platforms
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// Element e of the full tensor is the normal drawn at stream position 2e
// (Rng::normal takes two draws), so a shard seeks to each of its row
// segments instead of generating the whole tensor.
static void fill_normal_shard(float* w, const ParamInfo& p, uint64_t stream, float std) {
  const int64_t full_rows = p.full_shape.empty() ? 1 : p.full_shape[0];
  const int64_t full_cols = shape_numel(p.full_shape) / std::max<int64_t>(full_rows, 1);
  const int64_t rows = p.shape.empty() ? 1 : p.shape[0];
  const int64_t cols = p.numel / std::max<int64_t>(rows, 1);
  const TpShard& s = p.shard;
  const bool split = s.split != TpSplit::kReplicated && s.tp > 1;
  Rng rng(stream);
  for (int64_t i = 0; i < rows; ++i) {
    int64_t full_row = i, col0 = 0;
    if (split && s.split == TpSplit::kRows) {
      const int64_t block = rows / s.parts;  // local rows per part
      full_row = (i / block) * (full_rows / s.parts) + s.rank * block + i % block;
    } else if (split) {
      col0 = s.rank * cols;
    }
    rng.set_state(stream + 2 * static_cast<uint64_t>(full_row * full_cols + col0));
    for (int64_t j = 0; j < cols; ++j) w[i * cols + j] = static_cast<float>(rng.normal()) * std;
  }
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
      fill_normal_shard(w, p, stream_seed(seed, name_hash(p.init_name)), p.init == Init::kNormal ? std : scaled);
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
