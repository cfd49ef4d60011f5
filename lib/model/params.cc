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
  used_ = dense_end_ = expert_begin_ = total_;  // no expert region before layout()
  infos_.push_back(std::move(p));
  return static_cast<int>(infos_.size()) - 1;
}

int64_t ParamStore::count() const {
  int64_t n = 0;
  for (const ParamInfo& p : infos_)
    if (!p.buffer) n += p.numel;
  return n;
}

int64_t ParamStore::trainable_count() const {
  int64_t n = 0;
  for (const ParamInfo& p : infos_)
    if (p.trainable) n += p.numel;
  return n;
}

int64_t ParamStore::layout(int64_t dense_multiple) {
  // Trainable first, in registration order: a layer's trainable parameters
  // stay contiguous, so its gradient span is one range (its expert-parallel
  // ones form a second range, in the expert region).
  int64_t at = 0;
  auto place = [&](bool expert) {
    for (ParamInfo& p : infos_) {
      if (!p.trainable || p.expert_parallel != expert) continue;
      p.offset = (at + 15) / 16 * 16;  // 16-float aligned: vector loops never straddle two
      at = p.offset + p.numel;
    }
  };
  place(false);
  dense_end_ = expert_begin_ = at;
  if (std::any_of(infos_.begin(), infos_.end(), [](const ParamInfo& p) { return p.trainable && p.expert_parallel; })) {
    const int64_t m = std::max<int64_t>(dense_multiple, 1);
    expert_begin_ = ((at + m - 1) / m * m + 15) / 16 * 16;
    at = expert_begin_;
    place(true);
  }
  used_ = total_ = at;
  place_frozen();
  laid_out_ = true;
  return used_;
}

void ParamStore::place_frozen() {
  int64_t at = total_;
  auto place = [&](bool buffers) {
    for (ParamInfo& p : infos_) {
      if (p.trainable || p.buffer != buffers) continue;
      p.offset = (at + 15) / 16 * 16;
      at = p.offset + p.numel;
    }
  };
  place(false);
  rounded_ = at;
  place(true);  // fp32 buffers last: outside every rounding to the model dtype
  frozen_ = at - total_;
}

void ParamStore::finalize(device::Device& dev, DType dtype, bool meta, int64_t min_numel, DType grad_dtype) {
  if (!laid_out_) layout();
  total_ = std::max(total_, min_numel);
  place_frozen();  // behind the padded trainable part
  params_ = Tensor(dev, {total_ + frozen_}, dtype, device::MemCategory::kWeights, "model parameters", meta);
  grads_ = Tensor(dev, {total_}, grad_dtype, device::MemCategory::kGrads,
                  grad_dtype == DType::kF32 ? "gradient buffer (fp32 main grads)" : "gradient buffer (bf16 main grads)",
                  meta);
  if (!meta) grads_.zero();
}

namespace {
float meta_token;  // stands for any parameter or gradient of a meta store; never dereferenced
}  // namespace

float* ParamStore::param(int i) { return params_.is_meta() ? &meta_token : params_.data() + infos_[i].offset; }

float* ParamStore::grad(int i) {
  if (!infos_[i].trainable) return nullptr;
  return grads_.is_meta() ? &meta_token : grads_.data() + infos_[i].offset;
}

static uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a, stable across platforms
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// Element e of the full tensor is drawn at stream position draws*e
// (Rng::normal takes two draws, Rng::uniform one), so a shard seeks to each
// of its row segments instead of generating the whole tensor.
template <class Draw>
static void fill_shard(float* w, const ParamInfo& p, uint64_t stream, uint64_t draws, Draw draw) {
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
    rng.set_state(stream + draws * static_cast<uint64_t>(full_row * full_cols + col0));
    for (int64_t j = 0; j < cols; ++j) w[i * cols + j] = draw(rng);
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
      const float s = p.init == Init::kNormal ? std : scaled;
      fill_shard(w, p, stream_seed(seed, name_hash(p.init_name)), 2,
                 [s](Rng& r) { return static_cast<float>(r.normal()) * s; });
    } else if (p.init == Init::kKaimingUniform) {
      const int64_t fan_in = p.full_shape.size() < 2 ? 1 : p.full_shape[1];
      const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
      fill_shard(w, p, stream_seed(seed, name_hash(p.init_name)), 1,
                 [bound](Rng& r) { return static_cast<float>((2.0 * r.uniform() - 1.0) * bound); });
    }
  }
  kernels::round_to_dtype(params_.data(), rounded_, dtype);
}

int ParamStore::find(const std::string& name) const {
  for (int i = 0; i < static_cast<int>(infos_.size()); ++i)
    if (infos_[i].name == name) return i;
  return -1;
}

}  // namespace mtrain::model
