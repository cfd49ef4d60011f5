#include "step_bench.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/rng.h"
#include "device/device.h"
#include "model/gpt.h"
#include "optim/grad_clip.h"
#include "optim/optimizer.h"
#include "sgemm_probe.h"
#include "shapes.h"
#include "train/trainer.h"

namespace mtrain::bench {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point& t) {
  const Clock::time_point now = Clock::now();
  const double ms = std::chrono::duration<double, std::milli>(now - t).count();
  t = now;
  return ms;
}

// Random next-token data for one (B, T) micro-batch; plain causal mask.
struct RandomTokens {
  std::vector<int32_t> tokens, targets, positions;  // (B, T) each
  model::TokenBatch view(int64_t B, int64_t T) const {
    model::TokenBatch b;
    b.B = B;
    b.T = T;
    b.tokens = tokens.data();
    b.targets = targets.data();
    b.positions = positions.data();
    b.aux_loss_scale = 1.0f / static_cast<float>(B * T);  // one token loss's weight, as the trainer sets it
    return b;
  }
};

RandomTokens random_tokens(int64_t B, int64_t T, int64_t vocab, uint64_t seed) {
  RandomTokens r;
  Rng rng(seed);
  for (int64_t i = 0; i < B * T; ++i) {
    r.tokens.push_back(static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(vocab)));
    r.targets.push_back(static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(vocab)));
    r.positions.push_back(static_cast<int32_t>(i % T));
  }
  return r;
}

uint64_t fnv1a_bits(const float* x, int64_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, sizeof(u));
    h = (h ^ u) * 1099511628211ULL;
  }
  return h;
}

PhaseMs phase_medians(const std::vector<PhaseMs>& steps) {
  auto med = [&](double PhaseMs::*f) {
    std::vector<double> v;
    for (const PhaseMs& s : steps) v.push_back(s.*f);
    return median(v);
  };
  PhaseMs m;
  m.forward = med(&PhaseMs::forward);
  m.backward = med(&PhaseMs::backward);
  m.grad_norm = med(&PhaseMs::grad_norm);
  m.adamw = med(&PhaseMs::adamw);
  m.total = med(&PhaseMs::total);
  return m;
}

}  // namespace

ShapeResult run_shape(const ShapeSpec& spec, const BenchOptions& opts) {
  const model::ModelConfig& c = spec.config;
  device::Device dev(device::DeviceProfile{}, 0);
  model::GptModel gpt(c, dev);
  model::ParamStore& ps = gpt.params();
  optim::OptimizerConfig oc;
  oc.type = "adam";
  oc.beta1 = 0.9;
  oc.beta2 = 0.95;
  oc.weight_decay = 0.1;
  optim::Optimizer adamw(dev, train::optimizer_ranges(ps), ps.numel(), c.dtype, oc);
  adamw.init_master_from(ps.params().data());

  const int64_t B = c.micro_batch, T = c.seq_length, N = B * T;
  const std::vector<float> dloss(N, 1.0f / static_cast<float>(N));  // d(mean loss) / d(token loss)
  ShapeResult r;
  r.name = spec.name;
  r.description = model::describe(c);
  r.params = ps.numel();
  r.matmul_params = bench::matmul_params(c);
  r.tokens_per_step = N;
  r.flops_per_step = bench::model_flops(c, N, T);

  float* grads = ps.grads().data();
  const int64_t n = ps.numel();
  for (int step = 0; step < opts.warmup_steps + opts.steps; ++step) {
    const RandomTokens data = random_tokens(B, T, c.vocab, 1000 + static_cast<uint64_t>(step));
    const model::TokenBatch tb = data.view(B, T);
    const uint64_t seed = stream_seed(c.seed, static_cast<uint64_t>(step));
    PhaseMs p;
    const Clock::time_point start = Clock::now();
    Clock::time_point t = start;
    gpt.forward(tb, seed, /*training=*/true);
    p.forward = ms_since(t);
    gpt.backward(tb, dloss.data(), seed, /*training=*/true, /*zero_grads=*/true);
    p.backward = ms_since(t);
    const double norm = optim::grad_norm(grads, n);
    const double clip_coeff = optim::clip_coefficient(opts.clip_grad, norm);  // applied inside the AdamW pass
    p.grad_norm = ms_since(t);
    adamw.step(ps.params().data(), grads, opts.lr, clip_coeff);
    p.adamw = ms_since(t);
    p.total = std::chrono::duration<double, std::milli>(t - start).count();
    if (step >= opts.warmup_steps) r.steps.push_back(p);
    double loss = 0;
    for (int64_t i = 0; i < N; ++i) loss += gpt.losses()[i];
    r.last_loss = loss / static_cast<double>(N);
    r.last_grad_norm = norm;
  }
  r.median = phase_medians(r.steps);
  r.best = *std::min_element(r.steps.begin(), r.steps.end(),
                             [](const PhaseMs& a, const PhaseMs& b) { return a.total < b.total; });
  r.params_hash = fnv1a_bits(ps.params().data(), n);
  return r;
}

}  // namespace mtrain::bench
