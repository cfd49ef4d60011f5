// LoRA on an MoE model: the experts' adapter kernels against an fp64
// reference of PEFT's per-expert math; every adapter of the model (attention,
// each routed expert's fc1/fc2, the shared expert's) against central finite
// differences with grouped and looped expert GEMMs; the base (and the router,
// unless --modules_to_save router) frozen; step 0 the base model exactly;
// adapter names and shapes; the dropout masks of expert rows follow their
// (token, expert) ids.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/errors.h"
#include "lora_test_util.h"
#include "model/lora_layer.h"
#include "moe/expert_lora.h"
#include "test_util/fp32_bounds.h"

namespace mtrain::lora {
namespace {

using model::GptModel;
using model::ModelConfig;
using model::ParamInfo;
using model::ParamStore;
using model::TokenBatch;
using model::testing::moe_total_loss;
using model::testing::random_batch;
using model::testing::RandomBatch;
using model::testing::routed_central_difference;
using mtrain::testing::fp32_gamma;
using mtrain::testing::within_bounds;

std::vector<float> random(int64_t n, uint64_t seed) { return testing::random_uniform(n, seed); }

// Three experts' rows back to back (5, 0, 7): expert 1 gets no rows, expert
// 2 has no adapter (its rows must pass unchanged).
TEST(ExpertAdapters, MatchAnFp64ReferenceExpertByExpert) {
  const int64_t E = 3, IN = 20, OUT = 9, r = 3, M = 12;
  const int64_t rows[E] = {5, 0, 7};
  const float s = 2.5f;
  const auto x = random(M * IN, 1), dy = random(M * OUT, 2);
  std::vector<std::vector<float>> A, B;
  moe::ExpertAdapterSite site;
  std::vector<std::vector<float>> dA(E, std::vector<float>(r * IN, 0.f)), dB(E, std::vector<float>(OUT * r, 0.f));
  for (int64_t e = 0; e < E; ++e) {
    A.push_back(random(r * IN, 10 + e));
    B.push_back(random(OUT * r, 20 + e));
    const bool on = e != 2;
    site.a.push_back(on ? A[e].data() : nullptr);
    site.b.push_back(on ? B[e].data() : nullptr);
    site.a_grad.push_back(on ? dA[e].data() : nullptr);
    site.b_grad.push_back(on ? dB[e].data() : nullptr);
  }
  std::vector<float> y(M * OUT, 0.5f), h(M * r, 0.f), dh(M * r), dx(M * IN, 0.25f);
  const lora::DropoutSite none{};
  moe::expert_adapter_forward(y.data(), h.data(), nullptr, x.data(), site, r, s, rows, E, IN, OUT, none);
  moe::expert_adapter_backward(dx.data(), dh.data(), nullptr, dy.data(), x.data(), h.data(), site, r, s, rows, E, IN,
                               OUT, none);

  // fp64 reference, bounds as tests/lora/test_lora_kernels.cc: a chain of
  // two dot products of k1 and k2 terms is within gamma(k1 + k2 + 2) of the
  // sum of its absolute products, times 2 for the dropped first-order terms.
  std::vector<float> yr(y.size()), dxr(dx.size());
  std::vector<double> yb(y.size()), dxb(dx.size());
  std::vector<std::vector<double>> dAd(E, std::vector<double>(r * IN, 0.0)), dBd(E, std::vector<double>(OUT * r, 0.0));
  std::vector<std::vector<double>> dAb(E, std::vector<double>(r * IN, 0.0)), dBb(E, std::vector<double>(OUT * r, 0.0));
  for (int64_t e = 0, off = 0; e < E; off += rows[e++]) {
    const bool on = e != 2;
    for (int64_t n = off; n < off + rows[e]; ++n) {
      std::vector<double> hr(r, 0.0), ha(r, 0.0), dhr(r, 0.0), dha(r, 0.0);
      for (int64_t k = 0; on && k < r; ++k) {
        for (int64_t j = 0; j < IN; ++j)
          hr[k] += double(x[n * IN + j]) * A[e][k * IN + j],
              ha[k] += std::abs(double(x[n * IN + j]) * A[e][k * IN + j]);
        for (int64_t o = 0; o < OUT; ++o)
          dhr[k] += s * double(dy[n * OUT + o]) * B[e][o * r + k],
              dha[k] += std::abs(s * double(dy[n * OUT + o]) * B[e][o * r + k]);
      }
      for (int64_t o = 0; o < OUT; ++o) {
        double v = 0.5, a = 0.5;
        for (int64_t k = 0; on && k < r; ++k)
          v += s * hr[k] * B[e][o * r + k], a += s * ha[k] * std::abs(B[e][o * r + k]);
        yr[n * OUT + o] = float(v), yb[n * OUT + o] = 2 * fp32_gamma(IN + r + 2) * a;
      }
      for (int64_t j = 0; j < IN; ++j) {
        double v = 0.25, a = 0.25;
        for (int64_t k = 0; on && k < r; ++k) v += dhr[k] * A[e][k * IN + j], a += dha[k] * std::abs(A[e][k * IN + j]);
        dxr[n * IN + j] = float(v), dxb[n * IN + j] = 2 * fp32_gamma(OUT + r + 2) * a;
      }
      if (!on) continue;
      for (int64_t k = 0; k < r; ++k) {
        for (int64_t o = 0; o < OUT; ++o)
          dBd[e][o * r + k] += s * dy[n * OUT + o] * hr[k],
              dBb[e][o * r + k] += 2 * fp32_gamma(rows[e] + IN + 2) * std::abs(s * dy[n * OUT + o]) * ha[k];
        for (int64_t j = 0; j < IN; ++j)
          dAd[e][k * IN + j] += dhr[k] * x[n * IN + j],
              dAb[e][k * IN + j] += 2 * fp32_gamma(rows[e] + OUT + 2) * dha[k] * std::abs(x[n * IN + j]);
      }
    }
  }
  EXPECT_TRUE(within_bounds(y, yr, yb));
  EXPECT_TRUE(within_bounds(dx, dxr, dxb));
  for (int64_t e = 0; e < E; ++e) {
    const std::vector<float> dAr(dAd[e].begin(), dAd[e].end()), dBr(dBd[e].begin(), dBd[e].end());
    EXPECT_TRUE(within_bounds(dA[e], dAr, dAb[e])) << "expert " << e;
    EXPECT_TRUE(within_bounds(dB[e], dBr, dBb[e])) << "expert " << e;
  }
}

// tiny_moe (layer 0: 4 experts of 8, top-2, gated shared expert of 12; layer
// 1 dense) with rank-4 adapters on every linear.
ModelConfig tiny_moe_lora() { return testing::tiny_lora(model::testing::tiny_moe()); }

struct Case {
  std::string name;
  ModelConfig config;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> cases() {
  ModelConfig grouped = tiny_moe_lora(), looped = tiny_moe_lora(), router = tiny_moe_lora();
  looped.moe.grouped_gemm = false;
  router.lora.modules_to_save = {"router"};
  ModelConfig drop = tiny_moe_lora();
  drop.lora.dropout = 0.3f;  // the masks must be the same in forward, backward and every FD evaluation
  return {{"grouped", grouped}, {"looped", looped}, {"router_saved", router}, {"dropout", drop}};
}

class LoraMoeGrad : public ::testing::TestWithParam<Case> {};

TEST_P(LoraMoeGrad, AdaptersMatchFiniteDifferencesAndTheBaseIsFrozen) {
  const ModelConfig& c = GetParam().config;
  device::Device dev(device::DeviceProfile{}, 0);
  GptModel m(c, dev);
  ParamStore& ps = m.params();
  testing::randomize_lora_b(ps, 5);  // at B = 0 the gradient of A is exactly 0
  RandomBatch rb = random_batch(c.micro_batch, c.seq_length, c.vocab, 11);
  TokenBatch b = rb.view(c.micro_batch, c.seq_length, false);
  b.aux_loss_scale = 1.0f;
  ps.grads().zero();
  uint64_t routing = 0;
  moe_total_loss(m, b, rb.weights, &routing);
  m.backward(b, rb.weights.data(), 7, true);
  const std::vector<float> analytic(ps.grads().data(), ps.grads().data() + ps.numel());

  // Routing is piecewise constant: a perturbation that flips a top-k choice
  // has no derivative to compare (skipped, counted). Bound as LoraGrad's.
  const float eps = 1e-2f;
  Rng pick(3);
  int adapters = 0, expert_adapters = 0, checked = 0, flipped = 0;
  const bool router_saved = !c.lora.modules_to_save.empty();
  for (int i = 0; i < static_cast<int>(ps.infos().size()); ++i) {
    const ParamInfo& p = ps.info(i);
    const bool router = p.name.ends_with("mlp.router.weight");
    if (p.in_base && !(router && router_saved)) {
      EXPECT_FALSE(p.trainable) << p.name;
      EXPECT_EQ(ps.grad(i), nullptr) << p.name;
      continue;
    }
    ASSERT_TRUE(p.trainable) << p.name;
    if (!p.in_base) ++adapters;
    if (p.name.find(".experts.local_experts.") != std::string::npos) ++expert_adapters;
    for (int rep = 0; rep < 3; ++rep) {
      const int64_t j = static_cast<int64_t>(pick.next_u64() % p.numel);
      float* w = ps.param(i) + j;
      const std::optional<double> fd_or = routed_central_difference(m, b, rb.weights, w, eps, routing);
      if (!fd_or) {
        ++flipped;
        continue;
      }
      const double fd = *fd_or;
      EXPECT_NEAR(analytic[p.offset + j], fd, 2e-3 + 2e-2 * std::abs(fd)) << p.name << " element " << j;
      ++checked;
    }
  }
  // Layer 0: qkv, proj, 4 experts x (fc1, fc2), shared fc1, fc2; layer 1: four linears. A and B each.
  EXPECT_EQ(adapters, 2 * (2 + 4 * 2 + 2 + 4));
  EXPECT_EQ(expert_adapters, 2 * 4 * 2);
  EXPECT_GT(checked, 4 * flipped);
}

INSTANTIATE_TEST_SUITE_P(Variants, LoraMoeGrad, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// PEFT's init (B = 0): step 0 is the base MoE model bit for bit; with B != 0
// the experts' adapters move it.
TEST(LoraMoe, StepZeroEqualsTheBaseAndTheExpertAdaptersMoveIt) {
  ModelConfig lora = tiny_moe_lora();
  lora.lora.target_regex = ".*\\.experts\\.local_experts\\.[0-9]+\\.linear_fc[12]";  // only the routed experts
  testing::expect_step_zero_is_the_base(model::testing::tiny_moe(), lora);
}

// PEFT's names on mcore modules, with the global expert index; the shapes
// r x in and out x r of each linear (SwiGLU fc1: out = 2 F).
TEST(LoraMoe, AdapterNamesAndShapes) {
  const ModelConfig c = tiny_moe_lora();
  device::Device dev(device::DeviceProfile{}, 0);
  GptModel m(c, dev);
  const ParamStore& ps = m.params();
  const std::string e3 = "decoder.layers.0.mlp.experts.local_experts.3.";
  const std::string sh = "decoder.layers.0.mlp.shared_experts.";
  const int64_t r = 4, C = c.hidden, F = c.moe.ffn, Fs = c.moe.shared_ffn;
  const std::vector<std::pair<std::string, Shape>> want = {
      {e3 + "linear_fc1.lora_A.weight", {r, C}},  {e3 + "linear_fc1.lora_B.weight", {2 * F, r}},
      {e3 + "linear_fc2.lora_A.weight", {r, F}},  {e3 + "linear_fc2.lora_B.weight", {C, r}},
      {sh + "linear_fc1.lora_A.weight", {r, C}},  {sh + "linear_fc1.lora_B.weight", {2 * Fs, r}},
      {sh + "linear_fc2.lora_A.weight", {r, Fs}}, {sh + "linear_fc2.lora_B.weight", {C, r}}};
  for (const auto& [name, shape] : want) {
    const int i = ps.find(name);
    ASSERT_GE(i, 0) << name;
    EXPECT_EQ(ps.info(i).full_shape, shape) << name;
  }
  EXPECT_LT(ps.find("decoder.layers.0.mlp.linear_fc1.lora_A.weight"), 0) << "an MoE layer has no dense fc1";
  EXPECT_LT(ps.find("decoder.layers.0.mlp.router.lora_A.weight"), 0) << "all-linear leaves the router alone";
}

// The dropout mask of a row follows its id, not its place: the same rows in
// another order (another layout's dispatch) with their ids draw the same
// masks; and the ids survive the dispatch's fp32 packing exactly.
TEST(ExpertAdapters, DropoutMaskFollowsTheRowIds) {
  const int64_t M = 6, IN = 16, r = 2, OUT = 3;
  const auto x = random(M * IN, 5), A = random(r * IN, 6), B = random(OUT * r, 7);
  const std::vector<int64_t> ids = {int64_t{1} << 40, 7, 3 * 128 + 5, 0, 999999, (int64_t{1} << 33) + 17};
  moe::ExpertAdapterSite site{{A.data()}, {B.data()}, {nullptr}, {nullptr}};
  const int64_t rows[1] = {M};
  auto run = [&](const std::vector<float>& xs, const std::vector<int64_t>& is) {
    std::vector<float> y(M * OUT, 0.f), h(M * r), scratch(M * IN);
    lora::DropoutSite d;
    d.p = 0.5f;
    d.seed = 42;
    d.row_stride = IN;
    d.row_ids = is.data();
    moe::expert_adapter_forward(y.data(), h.data(), scratch.data(), xs.data(), site, r, 1.f, rows, 1, IN, OUT, d);
    return h;
  };
  std::vector<float> xr(M * IN);
  std::vector<int64_t> ir(M);
  for (int64_t n = 0; n < M; ++n) {  // reversed
    std::copy(x.begin() + n * IN, x.begin() + (n + 1) * IN, xr.begin() + (M - 1 - n) * IN);
    ir[M - 1 - n] = ids[n];
  }
  const auto h = run(x, ids), hr = run(xr, ir);
  for (int64_t n = 0; n < M; ++n)
    for (int64_t k = 0; k < r; ++k) EXPECT_EQ(h[n * r + k], hr[(M - 1 - n) * r + k]) << "row " << n;
  std::vector<int64_t> swapped = ids;
  std::swap(swapped[0], swapped[1]);
  EXPECT_NE(run(x, swapped), h) << "another id, another mask";
  std::vector<float> packed(2 * M);
  std::vector<int64_t> back(M);
  moe::pack_row_ids(packed.data(), ids.data(), M);
  moe::unpack_row_ids(back.data(), packed.data(), M);
  EXPECT_EQ(back, ids);
}

// A row's id is (token numbered by sequence and position) * E + expert.
TEST(ExpertAdapters, RowIdsNumberTokenAndExpert) {
  // 3 experts, rows 2, 0, 3; tokens of this rank start at 5 of sequences of T = 4 (pitch 8); -1: padding.
  const int32_t row_token[5] = {0, 2, 1, -1, 3};
  const int64_t rows_all[3] = {2, 0, 3};
  int64_t ids[5];
  moe::expert_row_ids(ids, row_token, rows_all, 3, 5, 4, 8);
  // token 5 = (1, 1) -> 9; 7 = (1, 3) -> 11; 6 -> 10; 8 = (2, 0) -> 16.
  const int64_t want[5] = {9 * 3 + 0, 11 * 3 + 0, 10 * 3 + 2, 0, 16 * 3 + 2};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(ids[i], want[i]) << "row " << i;
}

}  // namespace
}  // namespace mtrain::lora
