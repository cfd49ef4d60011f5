#include "model/qk_norm.h"

#include <algorithm>

#include "profiler/kernel_region.h"
#include "profiler/probe.h"
#include "tensor/norm.h"
#include "tensor/precision.h"

namespace mtrain::model {

namespace k = kernels;
using device::MemCategory;

void add_qk_norm_params(ParamStore& ps, const ModelConfig& c, const std::string& prefix, LayerParams& lp) {
  if (!c.qk_layernorm) return;
  // Replicated over TP and fed by this rank's heads only: counted once in the
  // grad norm, summed over TP (ParamInfo::sequence_parallel_grad) when TP > 1.
  auto replicated = [&](const std::string& name, Init init) {
    const int i = ps.add(prefix + "self_attention." + name, {c.head_dim}, false, init);
    ps.mutable_info(i).counts_in_norm = c.tp_rank == 0;
    ps.mutable_info(i).sequence_parallel_grad = c.tp > 1;
    return i;
  };
  lp.q_ln_w = replicated("q_layernorm.weight", Init::kOnes);
  if (!c.rmsnorm) lp.q_ln_b = replicated("q_layernorm.bias", Init::kZeros);
  lp.k_ln_w = replicated("k_layernorm.weight", Init::kOnes);
  if (!c.rmsnorm) lp.k_ln_b = replicated("k_layernorm.bias", Init::kZeros);
}

void allocate_qk_norm_acts(LayerActs& a, const ModelConfig& c, device::Device& dev, bool meta, const std::string& tag) {
  if (!c.qk_layernorm) return;
  const int64_t B = c.micro_batch, T = c.seq_local(), H = c.heads_local(), G = c.groups_local(), D = c.head_dim;
  auto act = [&](Shape s, DType t, const std::string& name) {
    return Tensor(dev, std::move(s), t, MemCategory::kActivations, tag + name, meta);
  };
  a.q_pre = act({B, H, T, D}, c.dtype, "query before q_layernorm");
  a.k_pre = act({B, G, T, D}, c.dtype, "key before k_layernorm");
  a.q_norm_rstd = act({B * H * T}, DType::kF32, "q_layernorm rstd");
  a.k_norm_rstd = act({B * G * T}, DType::kF32, "k_layernorm rstd");
  if (!c.rmsnorm) {
    a.q_norm_mean = act({B * H * T}, DType::kF32, "q_layernorm mean");
    a.k_norm_mean = act({B * G * T}, DType::kF32, "k_layernorm mean");
  }
}

void allocate_qk_norm_workspace(Workspace& w, const ModelConfig& c, device::Device& dev, bool meta) {
  if (!c.qk_layernorm) return;
  const int64_t B = c.micro_batch, T = c.seq_local(), H = c.heads_local(), G = c.groups_local(), D = c.head_dim;
  // q's rows (B, H, T, D) then k's (B, G, T, D)
  w.d_qk_pre = Tensor(dev, {B * (H + G) * T * D}, c.dtype, MemCategory::kActivations,
                      "grad of query and key before q/k_layernorm", meta);
}

int64_t qk_norm_scratch_floats(const ModelConfig& c, int64_t B, int64_t H, int64_t T, int64_t D) {
  if (!c.qk_layernorm || !c.rmsnorm || c.fusions.rmsnorm) return 0;
  return k::rmsnorm_scratch_floats(B * H * T, D);  // H >= G: the query rows are the most
}

float* qk_split_query(const ModelConfig& c, LayerActs& a) { return c.qk_layernorm ? a.q_pre.data() : a.q.data(); }
float* qk_split_key(const ModelConfig& c, LayerActs& a) { return c.qk_layernorm ? a.k_pre.data() : a.k.data(); }

namespace {

const float* opt_param(ParamStore& ps, int i) { return i < 0 ? nullptr : ps.param(i); }
float* opt_grad(ParamStore& ps, int i) { return i < 0 ? nullptr : ps.grad(i); }

// out (rows, D) = norm(in) with weight w (and bias b for LayerNorm).
void norm_rows_forward(const ModelConfig& c, ParamStore& ps, int w, int b, float* out, Tensor& mean, Tensor& rstd,
                       const float* in, int64_t rows, float* scratch) {
  const int64_t D = c.head_dim;
  if (c.rmsnorm) {
    k::rmsnorm_forward(out, rstd.data(), in, ps.param(w), rows, D, c.norm_eps, c.fusions.rmsnorm, scratch);
  } else {
    k::layernorm_forward(out, mean.data(), rstd.data(), in, ps.param(w), opt_param(ps, b), rows, D, c.norm_eps);
  }
  if (c.dtype != DType::kF32) k::round_to_dtype(out, rows * D, c.dtype);
}

// din (rows, D) = d(in), overwritten; weight (and bias) gradients accumulate.
void norm_rows_backward(const ModelConfig& c, ParamStore& ps, int w, int b, float* din, const float* dout,
                        const float* in, Tensor& mean, Tensor& rstd, int64_t rows, float* scratch) {
  const int64_t D = c.head_dim;
  if (!profiler::shape_only()) std::fill(din, din + rows * D, 0.f);  // the kernels accumulate into din
  if (c.rmsnorm) {
    k::rmsnorm_backward(din, ps.grad(w), dout, in, ps.param(w), rstd.data(), rows, D, c.fusions.rmsnorm, scratch);
  } else {
    k::layernorm_backward(din, ps.grad(w), opt_grad(ps, b), dout, in, ps.param(w), mean.data(), rstd.data(), rows, D);
  }
  if (c.dtype != DType::kF32) k::round_to_dtype(din, rows * D, c.dtype);
}

}  // namespace

namespace pf = profiler;

// The probe module of one norm: (B, heads, T, D) tensors, this rank's heads.
struct NormScope {
  const ModelConfig& c;
  int64_t B, T, heads;
  pf::TensorRef ref(const char* role, const float* p) const {
    return pf::tensor_4d(role, p, B, heads, T, c.head_dim, dtype_name(c.dtype), pf::Partition::kTpShard);
  }
};

void qk_norm_forward(const ModelConfig& c, ParamStore& ps, const LayerParams& lp, LayerActs& a, int64_t B, int64_t T,
                     float* scratch) {
  if (!c.qk_layernorm) return;
  const NormScope q{c, B, T, c.heads_local()}, kk{c, B, T, c.groups_local()};
  {
    pf::Scope m({pf::Kind::kModule, pf::Pass::kForward, "q_layernorm"}, {q.ref("input", a.q_pre.data())});
    norm_rows_forward(c, ps, lp.q_ln_w, lp.q_ln_b, a.q.data(), a.q_norm_mean, a.q_norm_rstd, a.q_pre.data(),
                      B * T * q.heads, scratch);
    m.end({q.ref("output", a.q.data())});
  }
  pf::Scope m({pf::Kind::kModule, pf::Pass::kForward, "k_layernorm"}, {kk.ref("input", a.k_pre.data())});
  norm_rows_forward(c, ps, lp.k_ln_w, lp.k_ln_b, a.k.data(), a.k_norm_mean, a.k_norm_rstd, a.k_pre.data(),
                    B * T * kk.heads, scratch);
  m.end({kk.ref("output", a.k.data())});
}

QkGrads qk_norm_backward(const ModelConfig& c, ParamStore& ps, const LayerParams& lp, LayerActs& a, Workspace& w,
                         int64_t B, int64_t T, float* scratch) {
  if (!c.qk_layernorm) return {w.d_q.data(), w.d_k.data()};
  const NormScope q{c, B, T, c.heads_local()}, kk{c, B, T, c.groups_local()};
  float* dq = w.d_qk_pre.data();
  float* dk = dq ? dq + B * T * q.heads * c.head_dim : nullptr;  // null: a shape-only step
  {
    pf::Scope m({pf::Kind::kModule, pf::Pass::kBackward, "k_layernorm"}, {kk.ref("grad_output", w.d_k.data())});
    norm_rows_backward(c, ps, lp.k_ln_w, lp.k_ln_b, dk, w.d_k.data(), a.k_pre.data(), a.k_norm_mean, a.k_norm_rstd,
                       B * T * kk.heads, scratch);
    m.end({kk.ref("grad_input", dk)});
  }
  pf::Scope m({pf::Kind::kModule, pf::Pass::kBackward, "q_layernorm"}, {q.ref("grad_output", w.d_q.data())});
  norm_rows_backward(c, ps, lp.q_ln_w, lp.q_ln_b, dq, w.d_q.data(), a.q_pre.data(), a.q_norm_mean, a.q_norm_rstd,
                     B * T * q.heads, scratch);
  m.end({q.ref("grad_input", dq)});
  return {dq, dk};
}

}  // namespace mtrain::model
