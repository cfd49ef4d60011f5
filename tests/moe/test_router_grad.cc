// The router's backward against central finite differences of the fp64
// reference loss (router_reference.h: Megatron's routing, dropping, aux /
// seq-aux / z losses; the aux losses weighted by MoEAuxLossAutoScaler's
// scale). Top-k selection, the aux routing map and the capacity mask are
// piecewise constant: each case checks that no finite-difference step
// changes any of them (inputs away from ties), so the differences measure
// the smooth part Megatron's autograd differentiates.
#include <gtest/gtest.h>

#include <string>

#include "router_test_util.h"
#include "test_util/fp32_bounds.h"

namespace mtrain::moe {
namespace {

using testing::base_config;
using testing::make_problem;

using Case = testing::NamedConfig;

std::vector<Case> cases() {
  std::vector<Case> v;
  RouterConfig c = base_config();
  c.aux_loss_coeff = 0.5;  // large coefficients so the loss terms show in the gradient
  c.z_loss_coeff = 0.2;
  v.push_back({"softmax_aux_z", c});
  c.pre_softmax = true;
  c.topk_scaling_factor = 2.5;
  c.load_balancing = LoadBalancing::kSeqAuxLoss;
  v.push_back({"softmax_pre_scaled_seq_aux_z", c});
  c = base_config();
  c.score_function = ScoreFunction::kSigmoid;
  c.topk = 3;
  c.topk_scaling_factor = 1.5;
  c.aux_loss_coeff = 0.5;
  c.enable_expert_bias = true;
  v.push_back({"sigmoid_top3_bias_scaled_aux", c});
  c.topk = 1;
  c.enable_expert_bias = false;
  c.load_balancing = LoadBalancing::kSeqAuxLoss;
  c.z_loss_coeff = 0.2;
  v.push_back({"sigmoid_top1_seq_aux_z", c});
  c = base_config();
  c.pre_softmax = true;
  c.capacity_factor = 1.0;  // 12 tokens * 2 / 6 experts: capacity 4, some experts overflow
  c.drop_policy = DropPolicy::kProbs;
  c.aux_loss_coeff = 0.5;
  v.push_back({"capacity_probs_aux", c});
  c.drop_policy = DropPolicy::kPosition;
  c.capacity_factor = 0.7;
  v.push_back({"capacity_position_aux", c});
  return v;
}

struct Fd {
  std::vector<float> dx, dw;  // the finite differences, rounded to fp32 for the comparison helpers
  int map_changes = 0;        // steps that moved a piecewise-constant decision
};

// Central differences in double, step h: truncation O(h^2 * f''') ~ 1e-10
// and rounding ~ 1e-16 / h ~ 1e-11, far below the fp32 bounds.
Fd finite_differences(const testing::Problem& p) {
  constexpr double h = 1e-5;
  std::vector<double> x(p.x.begin(), p.x.end()), w(p.w.begin(), p.w.end());
  testing::RefRouting base;
  testing::ref_loss(p, x, w, &base);
  Fd fd;
  auto diff = [&](std::vector<double>& v, std::vector<float>& out) {
    for (size_t i = 0; i < v.size(); ++i) {
      const double keep = v[i];
      testing::RefRouting plus, minus;
      v[i] = keep + h;
      const double lp = testing::ref_loss(p, x, w, &plus);
      v[i] = keep - h;
      const double lm = testing::ref_loss(p, x, w, &minus);
      v[i] = keep;
      out.push_back(static_cast<float>((lp - lm) / (2 * h)));
      for (const auto* r : {&plus, &minus}) fd.map_changes += r->map != base.map || r->aux_map != base.aux_map;
    }
  };
  diff(x, fd.dx);
  diff(w, fd.dw);
  return fd;
}

TEST(RouterGrad, MatchesFiniteDifferencesOfTheMegatronReference) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const testing::Problem p = make_problem(c.cfg, 7);
    const auto run = testing::run_router(p);
    const Fd fd = finite_differences(p);
    ASSERT_EQ(fd.map_changes, 0) << "inputs too close to a tie: pick another seed";
    if (c.cfg.capacity_factor) {
      int dropped = 0;
      for (uint8_t k : run.fwd.kept) dropped += !k;
      ASSERT_GT(dropped, 0) << "the capacity case should drop something";
    }
    // mtrain's fp32 gradients against the exact ones (router_test_util.h).
    const double rtol = testing::gradient_rtol(p);
    EXPECT_TRUE(mtrain::testing::close_in_max_norm(run.dx.data(), fd.dx.data(), fd.dx.size(), rtol)) << "dx";
    EXPECT_TRUE(mtrain::testing::close_in_max_norm(run.dw.data(), fd.dw.data(), fd.dw.size(), rtol)) << "dW";
  }
}

// The backward accumulates into dx and dW (the experts' input gradient and
// the gate's gradient from earlier micro-batches).
TEST(RouterGrad, AccumulatesIntoDxAndDw) {
  RouterConfig c = base_config();
  const testing::Problem p = make_problem(c, 9);
  const auto run = testing::run_router(p);
  std::vector<float> dx(run.dx.size(), 1.f), dw(run.dw.size(), -2.f), dlogits(run.dlogits.size());
  std::vector<float> dprobs(p.tokens() * c.topk);
  for (int64_t n = 0; n < p.tokens(); ++n)
    for (int j = 0; j < c.topk; ++j)
      dprobs[n * c.topk + j] = static_cast<float>(p.up[n * c.num_experts + run.fwd.expert_ids[n * c.topk + j]]);
  router_backward(dx.data(), dw.data(), dlogits.data(), dprobs.data(), run.fwd, p.x.data(), p.w.data(), c,
                  p.aux_grad_scale);
  // 1 + g and -2 + g are one more fp32 rounding of the same g.
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(dx[i], 1.f + run.dx[i], 2 * 0x1p-24 * (1 + std::fabs(run.dx[i])));
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_NEAR(dw[i], -2.f + run.dw[i], 2 * 0x1p-24 * (2 + std::fabs(run.dw[i])));
}

}  // namespace
}  // namespace mtrain::moe
