#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/errors.h"
#include "profiler/kernel_region.h"
#include "tensor/precision.h"

namespace mtrain::optim {

namespace {

// Elements per work segment: large enough to amortise scheduling, small enough
// that a segment's params, grads and states stay in L2 while it is updated.
constexpr int64_t kSegmentElems = 1 << 14;

using device::MemCategory;

void validate_ranges(const std::vector<ParamRange>& ranges, int64_t numel) {
  if (numel < 0) throw Error(ExitCode::kInternal, "optimizer: negative parameter count " + std::to_string(numel));
  std::vector<const ParamRange*> sorted;
  for (const ParamRange& r : ranges) {
    if (r.offset < 0 || r.numel < 0 || r.offset + r.numel > numel) {
      throw Error(ExitCode::kInternal, "optimizer: parameter range '" + r.name + "' [" + std::to_string(r.offset) +
                                           ", " + std::to_string(r.offset + r.numel) +
                                           ") lies outside the flat buffer of " + std::to_string(numel) + " elements");
    }
    sorted.push_back(&r);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const ParamRange* a, const ParamRange* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    const ParamRange& prev = *sorted[i - 1];
    if (prev.offset + prev.numel > sorted[i]->offset) {
      throw Error(ExitCode::kInternal,
                  "optimizer: parameter ranges '" + prev.name + "' and '" + sorted[i]->name + "' overlap");
    }
  }
}

void validate_config(const OptimizerConfig& cfg) {
  if (cfg.type != "adam" && cfg.type != "sgd") {
    throw ConfigError("--optimizer: unknown optimizer '" + cfg.type + "'", "choose adam or sgd");
  }
  if (cfg.type == "adam") {
    if (!(cfg.beta1 >= 0.0 && cfg.beta1 < 1.0)) throw ConfigError("--adam-beta1 must be in [0, 1)");
    if (!(cfg.beta2 >= 0.0 && cfg.beta2 < 1.0)) throw ConfigError("--adam-beta2 must be in [0, 1)");
    if (!(cfg.eps >= 0.0)) throw ConfigError("--adam-eps must be >= 0");
  }
  if (!(cfg.weight_decay >= 0.0)) throw ConfigError("--weight-decay must be >= 0");
  if (cfg.type == "sgd" && !(cfg.sgd_momentum >= 0.0)) throw ConfigError("--sgd-momentum must be >= 0");
}

bool needs_master(DType model_dtype) { return model_dtype != DType::kF32; }

// The shard sorted, validated, and clipped to [0, numel) (DP padding past the
// end of the parameters is dropped); empty pieces removed.
FlatIntervals normalized_shard(FlatIntervals shard, int64_t numel) {
  std::sort(shard.begin(), shard.end());
  FlatIntervals out;
  for (size_t i = 0; i < shard.size(); ++i) {
    const auto [begin, end] = shard[i];
    if (begin < 0 || end < begin) {
      throw Error(ExitCode::kInternal,
                  "optimizer: bad shard interval [" + std::to_string(begin) + ", " + std::to_string(end) + ")");
    }
    if (i > 0 && shard[i - 1].second > begin) {
      throw Error(ExitCode::kInternal, "optimizer: shard intervals [" + std::to_string(shard[i - 1].first) + ", " +
                                           std::to_string(shard[i - 1].second) + ") and [" + std::to_string(begin) +
                                           ", " + std::to_string(end) + ") overlap");
    }
    if (std::min(end, numel) > begin) out.emplace_back(begin, std::min(end, numel));
  }
  return out;
}

// ranges ∩ shard (sorted shard), ascending by offset; Segment::state unset.
template <class Segment>
std::vector<Segment> intersect_ranges(const std::vector<ParamRange>& ranges, const FlatIntervals& shard) {
  std::vector<const ParamRange*> sorted;
  for (const ParamRange& r : ranges) sorted.push_back(&r);
  std::sort(sorted.begin(), sorted.end(),
            [](const ParamRange* a, const ParamRange* b) { return a->offset < b->offset; });
  std::vector<Segment> out;
  size_t k = 0;
  for (const ParamRange* r : sorted) {
    const int64_t r_end = r->offset + r->numel;
    while (k < shard.size() && shard[k].second <= r->offset) ++k;  // shard pieces before this range
    for (size_t j = k; j < shard.size() && shard[j].first < r_end; ++j) {
      const int64_t begin = std::max(r->offset, shard[j].first);
      const int64_t end = std::min(r_end, shard[j].second);
      if (begin < end) out.push_back({begin, end, 0, r->apply_weight_decay});
    }
  }
  return out;
}

}  // namespace

int64_t Optimizer::state_bytes(int64_t numel, DType model_dtype, const OptimizerConfig& cfg) {
  int64_t floats_per_param = 0;
  if (cfg.type == "adam") floats_per_param += 2;
  if (cfg.type == "sgd" && cfg.sgd_momentum != 0.0) floats_per_param += 1;
  if (needs_master(model_dtype)) floats_per_param += 1;
  return numel * floats_per_param * 4;
}

Optimizer::Optimizer(device::Device& dev, std::vector<ParamRange> ranges, int64_t numel, DType model_dtype,
                     OptimizerConfig cfg, bool meta)
    : Optimizer(dev, std::move(ranges), numel, model_dtype, std::move(cfg), FlatIntervals{}, meta) {}

Optimizer::Optimizer(device::Device& dev, std::vector<ParamRange> ranges, int64_t numel, DType model_dtype,
                     OptimizerConfig cfg, FlatIntervals shard, bool meta)
    : ranges_(std::move(ranges)),
      numel_(numel),
      model_dtype_(model_dtype),
      cfg_(std::move(cfg)),
      meta_(meta),
      sharded_(!shard.empty()) {
  validate_config(cfg_);
  validate_ranges(ranges_, numel_);
  kind_ = cfg_.type == "adam" ? Kind::kAdam : Kind::kSgd;
  build_segments(normalized_shard(std::move(shard), numel_));
  allocate_states(dev);
}

void Optimizer::allocate_states(device::Device& dev) {
  const Shape shape{state_numel_};
  if (kind_ == Kind::kAdam) {
    exp_avg_ = Tensor(dev, shape, DType::kF32, MemCategory::kOptimizer, "optimizer exp_avg (Adam m)", meta_);
    exp_avg_sq_ = Tensor(dev, shape, DType::kF32, MemCategory::kOptimizer, "optimizer exp_avg_sq (Adam v)", meta_);
  } else if (cfg_.sgd_momentum != 0.0) {
    momentum_ = Tensor(dev, shape, DType::kF32, MemCategory::kOptimizer, "optimizer SGD momentum buffer", meta_);
  }
  if (needs_master(model_dtype_)) {
    master_ = Tensor(dev, shape, DType::kF32, MemCategory::kOptimizer, "optimizer fp32 master params", meta_);
  }
}

// Unsharded: the states are flat (P) buffers indexed like params. Sharded: the
// pieces shard ∩ ranges in ascending order, packed back to back. A meta
// optimizer never touches data, so it keeps no segments (a dry run of a large
// model would otherwise hold millions).
void Optimizer::build_segments(const FlatIntervals& shard) {
  std::vector<Segment> pieces;
  if (!sharded_) {
    for (const ParamRange& r : ranges_) {
      pieces.push_back({r.offset, r.offset + r.numel, r.offset, r.apply_weight_decay});
    }
    state_numel_ = numel_;
    if (numel_ > 0) state_intervals_.emplace_back(0, numel_);
  } else {
    pieces = intersect_ranges<Segment>(ranges_, shard);
    for (Segment& p : pieces) {
      p.state = state_numel_;
      state_numel_ += p.end - p.begin;
      if (!state_intervals_.empty() && state_intervals_.back().second == p.begin) {
        state_intervals_.back().second = p.end;
      } else {
        state_intervals_.emplace_back(p.begin, p.end);
      }
    }
  }
  if (meta_) return;
  for (const Segment& p : pieces) {
    for (int64_t b = p.begin; b < p.end; b += kSegmentElems) {
      segments_.push_back({b, std::min(b + kSegmentElems, p.end), p.state + (b - p.begin), p.decay});
    }
  }
}

void Optimizer::init_master_from(const float* params) {
  if (!master_.defined()) return;
  float* master = master_.data();
  if (master && !sharded_ && numel_ > 0) {
    std::memcpy(master, params, static_cast<size_t>(numel_) * sizeof(float));
  } else if (master) {
    for (const Segment& s : segments_) {
      std::memcpy(master + s.state, params + s.begin, static_cast<size_t>(s.end - s.begin) * sizeof(float));
    }
  }
  master_valid_ = true;
}

void Optimizer::sync_params_from_master(float* params) {
  if (!master_.defined()) return;
  if (master_.data() && !sharded_ && numel_ > 0) {
    std::memcpy(params, master_.data(), static_cast<size_t>(numel_) * sizeof(float));
    kernels::round_to_dtype(params, numel_, model_dtype_);
  } else if (master_.data()) {
    for (const Segment& s : segments_) publish_segment(params, s);
  }
  master_valid_ = true;
}

std::vector<std::pair<std::string, Tensor*>> Optimizer::state_tensors() {
  std::vector<std::pair<std::string, Tensor*>> out;
  if (exp_avg_.defined()) out.emplace_back("exp_avg", &exp_avg_);
  if (exp_avg_sq_.defined()) out.emplace_back("exp_avg_sq", &exp_avg_sq_);
  if (momentum_.defined()) out.emplace_back("momentum_buffer", &momentum_);
  if (master_.defined()) out.emplace_back("fp32_param", &master_);
  return out;
}

// The device work of one step, per updated element, for the cost model (the
// two kernels Megatron runs: the fused update, then the copy of the main
// params into the 16-bit model params). Main grads and states are fp32.
//   adam update: reads param, grad, m, v; writes param, m, v: 7 x 4 = 28 bytes;
//     17 flops: g*scale 1, m 3, v 4, sqrt(v/bc2)+eps 3, (m/bc1)/denom + wd*p 4, p -= lr*u 2
//   sgd update with momentum: reads param, grad, buf; writes param, buf: 5 x 4 = 20 bytes;
//     7 flops: g*scale + wd*p 3, momentum*buf + d 2, p -= lr*buf 2
//   sgd update without momentum: reads param, grad; writes param: 3 x 4 = 12 bytes;
//     5 flops: p -= lr*(g*scale + wd*p)
//   main->model copy (bf16/fp16 models): reads the fp32 main param (4), writes
//     the model param at 2 bytes: 6 bytes; 1 flop (the rounding)
// "param" in the update is the fp32 master for a 16-bit model, the model's own
// fp32 param otherwise. Clipping adds nothing: it is the g*scale above.
profiler::Region Optimizer::update_region() const {
  const double n = static_cast<double>(state_numel_);
  if (kind_ == Kind::kAdam) return profiler::memory_kernel("adam_update", 28 * n, 17 * n);
  if (momentum_.defined()) return profiler::memory_kernel("sgd_update", 20 * n, 7 * n);
  return profiler::memory_kernel("sgd_update", 12 * n, 5 * n);
}

void Optimizer::step(float* params, const float* grads, double lr, double grad_scale) {
  if (master_.defined() && !master_valid_) {
    throw Error(ExitCode::kInternal, "optimizer: step() before init_master_from() for a " +
                                         std::string(dtype_name(model_dtype_)) + " model");
  }
  ++step_count_;
  const float scale = static_cast<float>(grad_scale);  // as clip_grads rounds its coefficient
  {
    profiler::Scope kernel(update_region());
    if (kind_ == Kind::kAdam && !meta_) adam_step(params, grads, lr, scale);
    if (kind_ == Kind::kSgd && !meta_) sgd_step(params, grads, lr, scale);
  }
  if (!master_.defined()) return;
  const double n = static_cast<double>(state_numel_);
  profiler::Scope kernel(profiler::memory_kernel("main_to_model_params_copy", 6 * n, n));
  if (meta_) return;
  const int64_t nseg = static_cast<int64_t>(segments_.size());
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < nseg; ++k) publish_segment(params, segments_[k]);
}

void Optimizer::publish_segment(float* params, const Segment& s) const {
  const int64_t n = s.end - s.begin;
  std::memcpy(params + s.begin, master_.data() + s.state, static_cast<size_t>(n) * sizeof(float));
  kernels::round_to_dtype(params + s.begin, n, model_dtype_);
}

// Arithmetic of apex's FusedAdam in AdamW mode (what Megatron's "adam" runs),
// in fp32 with double-precision scalars: algebraically torch.optim.AdamW.
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr * ( (m/bc1) / (sqrt(v/bc2) + eps) + wd p )
void Optimizer::adam_step(float* params, const float* grads, double lr, float grad_scale) {
  const double t = static_cast<double>(step_count_);
  const float b1 = static_cast<float>(cfg_.beta1);
  const float b2 = static_cast<float>(cfg_.beta2);
  const float one_minus_b1 = static_cast<float>(1.0 - cfg_.beta1);
  const float one_minus_b2 = static_cast<float>(1.0 - cfg_.beta2);
  const float bc1 = static_cast<float>(1.0 - std::pow(cfg_.beta1, t));
  const float bc2 = static_cast<float>(1.0 - std::pow(cfg_.beta2, t));
  const float eps = static_cast<float>(cfg_.eps);
  const float lr_f = static_cast<float>(lr);
  const float wd = static_cast<float>(cfg_.weight_decay);
  float* master = master_.data();  // nullptr: fp32 model, params are the target
  float* m_all = exp_avg_.data();
  float* v_all = exp_avg_sq_.data();
  const int64_t nseg = static_cast<int64_t>(segments_.size());
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < nseg; ++k) {
    const Segment& s = segments_[k];
    const float decay = s.decay ? wd : 0.0f;
    const int64_t n = s.end - s.begin;
    const float* g_seg = grads + s.begin;
    float* p = master ? master + s.state : params + s.begin;
    float* m = m_all + s.state;
    float* v = v_all + s.state;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float g = g_seg[i] * grad_scale;
      const float mi = b1 * m[i] + one_minus_b1 * g;
      const float vi = b2 * v[i] + one_minus_b2 * g * g;
      m[i] = mi;
      v[i] = vi;
      const float denom = std::sqrt(vi / bc2) + eps;
      const float update = (mi / bc1) / denom + decay * p[i];
      p[i] = p[i] - lr_f * update;
    }
  }
}

// torch.optim.SGD (dampening 0, no Nesterov), as Megatron's "sgd":
//   g += wd p;  buf = momentum buf + g  (buf starts at 0, so step 1 gives buf = g);  p -= lr buf
void Optimizer::sgd_step(float* params, const float* grads, double lr, float grad_scale) {
  const float momentum = static_cast<float>(cfg_.sgd_momentum);
  const float lr_f = static_cast<float>(lr);
  const float wd = static_cast<float>(cfg_.weight_decay);
  float* master = master_.data();     // nullptr: fp32 model, params are the target
  float* buf_all = momentum_.data();  // nullptr when momentum == 0
  const int64_t nseg = static_cast<int64_t>(segments_.size());
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < nseg; ++k) {
    const Segment& s = segments_[k];
    const float decay = s.decay ? wd : 0.0f;
    const int64_t n = s.end - s.begin;
    const float* g = grads + s.begin;
    float* p = master ? master + s.state : params + s.begin;
    if (buf_all) {
      float* buf = buf_all + s.state;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        const float d = g[i] * grad_scale + decay * p[i];
        const float b = momentum * buf[i] + d;
        buf[i] = b;
        p[i] = p[i] - lr_f * b;
      }
    } else {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) p[i] = p[i] - lr_f * (g[i] * grad_scale + decay * p[i]);
    }
  }
}

}  // namespace mtrain::optim
