// Fused == unfused for every kernel with a fusion flag (outputs and all
// gradients, to rounding), and flash attention == unfused attention,
// including sequence lengths that are not a multiple of the 64-wide tiles.
// Shapes are large enough to take the parallel paths (> 16k elements) and to
// span several 256-column blocks of the bias-gradient sums.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "tensor/activation.h"
#include "tensor/attention.h"
#include "tensor/cross_entropy.h"
#include "tensor/norm.h"
#include "tensor/rope.h"
#include "test_util/fp32_bounds.h"

namespace mtrain::kernels {
namespace {

using testing::all_close;
using testing::randn;
using testing::Vec;

constexpr double kAtol = 1e-6, kRtol = 1e-6;

TEST(Fusion, RmsNorm) {
  const int64_t N = 64, C = 300;
  const Vec inp = randn(N * C, 1), weight = randn(C, 2), dout = randn(N * C, 3), dinp0 = randn(N * C, 4);
  Vec out[2], rstd[2], dinp[2], dweight[2];
  Vec scratch(rmsnorm_scratch_floats(N, C));
  for (int f = 0; f < 2; ++f) {
    out[f].resize(N * C);
    rstd[f].resize(N);
    dinp[f] = dinp0;
    dweight[f].assign(C, 0.5f);
    rmsnorm_forward(out[f].data(), rstd[f].data(), inp.data(), weight.data(), N, C, 1e-6f, f == 1, scratch.data());
    rmsnorm_backward(dinp[f].data(), dweight[f].data(), dout.data(), inp.data(), weight.data(), rstd[f].data(), N, C,
                     f == 1, scratch.data());
  }
  EXPECT_TRUE(all_close(out[0], out[1], kAtol, kRtol));
  EXPECT_TRUE(all_close(rstd[0], rstd[1], kAtol, kRtol));
  EXPECT_TRUE(all_close(dinp[0], dinp[1], 1e-5, 1e-5));
  EXPECT_TRUE(all_close(dweight[0], dweight[1], 1e-5, 1e-5));
}

TEST(Fusion, BiasSwiglu) {
  const int64_t N = 64, F = 300;
  const Vec inp = randn(N * 2 * F, 5, 2.0f), bias = randn(2 * F, 6), dout = randn(N * F, 7);
  Vec out[2], dinp[2], dbias[2];
  Vec scratch(bias_swiglu_scratch_floats(N, F));
  for (int f = 0; f < 2; ++f) {
    out[f].resize(N * F);
    dinp[f].assign(N * 2 * F, NAN);  // OVERWRITTEN: stale contents must not leak through
    dbias[f].assign(2 * F, 0.25f);
    bias_swiglu_forward(out[f].data(), inp.data(), bias.data(), N, F, f == 1, scratch.data());
    bias_swiglu_backward(dinp[f].data(), dbias[f].data(), dout.data(), inp.data(), bias.data(), N, F, f == 1,
                         scratch.data());
  }
  EXPECT_TRUE(all_close(out[0], out[1], kAtol, kRtol));
  EXPECT_TRUE(all_close(dinp[0], dinp[1], kAtol, kRtol));
  EXPECT_TRUE(all_close(dbias[0], dbias[1], 1e-5, 1e-5));
}

TEST(Fusion, BiasGelu) {
  const int64_t N = 64, F = 300;
  const Vec inp = randn(N * F, 8, 2.0f), bias = randn(F, 9), dout = randn(N * F, 10);
  Vec out[2], dinp[2], dbias[2];
  Vec scratch(bias_gelu_scratch_floats(N, F));
  for (int f = 0; f < 2; ++f) {
    out[f].resize(N * F);
    dinp[f].assign(N * F, NAN);
    dbias[f].assign(F, 0.0f);
    bias_gelu_forward(out[f].data(), inp.data(), bias.data(), N, F, f == 1, scratch.data());
    bias_gelu_backward(dinp[f].data(), dbias[f].data(), dout.data(), inp.data(), bias.data(), N, F, f == 1,
                       scratch.data());
  }
  EXPECT_TRUE(all_close(out[0], out[1], kAtol, kRtol));
  EXPECT_TRUE(all_close(dinp[0], dinp[1], kAtol, kRtol));
  EXPECT_TRUE(all_close(dbias[0], dbias[1], 1e-5, 1e-5));
}

TEST(Fusion, BiasDropoutAdd) {
  const int64_t N = 64, C = 300;
  const Vec inp = randn(N * C, 11), bias = randn(C, 12), residual = randn(N * C, 13);
  Vec scratch(bias_dropout_add_scratch_floats(N, C));
  for (float p : {0.0f, 0.1f, 0.5f}) {
    Vec out[2];
    for (int f = 0; f < 2; ++f) {
      out[f].resize(N * C);
      bias_dropout_add_forward(out[f].data(), inp.data(), bias.data(), residual.data(), N, C, p, 1234, f == 1,
                               scratch.data());
    }
    EXPECT_TRUE(all_close(out[0], out[1], kAtol, kRtol)) << "p=" << p;
    // out may alias residual.
    Vec inplace = residual;
    bias_dropout_add_forward(inplace.data(), inp.data(), bias.data(), inplace.data(), N, C, p, 1234, true, nullptr);
    EXPECT_TRUE(testing::bit_equal(inplace, out[1])) << "p=" << p;
  }
}

TEST(Fusion, Rope) {
  const int64_t B = 2, H = 4, T = 33, D = 64;
  std::vector<int32_t> positions(B * T);
  for (int64_t t = 0; t < T; ++t) {
    positions[t] = static_cast<int32_t>(t);
    positions[T + t] = static_cast<int32_t>(t < 20 ? t : 4000 + t);  // a packed second sample, far positions
  }
  Vec x[2], dx[2];
  const Vec x0 = randn(B * H * T * D, 14), dx0 = randn(B * H * T * D, 15);
  Vec scratch(rope_scratch_floats(B, H, T, D));
  for (int f = 0; f < 2; ++f) {
    x[f] = x0;
    dx[f] = dx0;
    rope_forward(x[f].data(), positions.data(), B, H, T, D, 10000.0f, f == 1, scratch.data());
    rope_backward(dx[f].data(), positions.data(), B, H, T, D, 10000.0f, f == 1, scratch.data());
  }
  EXPECT_TRUE(all_close(x[0], x[1], kAtol, kRtol));
  EXPECT_TRUE(all_close(dx[0], dx[1], kAtol, kRtol));
  // backward is the inverse rotation: rope_backward(rope_forward(x)) == x.
  Vec roundtrip = x[1];
  rope_backward(roundtrip.data(), positions.data(), B, H, T, D, 10000.0f, true, nullptr);
  EXPECT_TRUE(all_close(roundtrip, x0, 1e-5, 1e-5));
}

// Unmasked (Vr == V) and with 63 padded columns (Vr = 937).
TEST(Fusion, CrossEntropy) {
  const int64_t N = 64, V = 1000;
  for (const int64_t Vr : {V, int64_t{937}}) {
    SCOPED_TRACE(Vr);
    const Vec logits = randn(N * V, 16, 3.0f), dlosses = randn(N, 17);
    std::vector<int32_t> targets(N);
    for (int64_t i = 0; i < N; ++i) targets[i] = static_cast<int32_t>((i * 37) % Vr);
    Vec losses[2], stats[2], dlogits[2];
    Vec scratch(cross_entropy_scratch_floats(N, V));
    for (int f = 0; f < 2; ++f) {
      losses[f].resize(N);
      stats[f].resize(2 * N);
      dlogits[f].assign(N * V, NAN);
      cross_entropy_forward(losses[f].data(), stats[f].data(), logits.data(), targets.data(), N, V, Vr, f == 1,
                            scratch.data());
      cross_entropy_backward(dlogits[f].data(), logits.data(), stats[f].data(), targets.data(), dlosses.data(), N, V,
                             Vr, f == 1, scratch.data());
    }
    EXPECT_TRUE(all_close(losses[0], losses[1], 1e-5, kRtol));
    EXPECT_TRUE(all_close(stats[0], stats[1], 1e-5, kRtol));
    EXPECT_TRUE(all_close(dlogits[0], dlogits[1], 1e-7, 1e-5));
    // Fused backward may write the gradient over the logits.
    Vec inplace = logits;
    cross_entropy_backward(inplace.data(), inplace.data(), stats[1].data(), targets.data(), dlosses.data(), N, V, Vr,
                           true, nullptr);
    EXPECT_TRUE(testing::bit_equal(inplace, dlogits[1]));
  }
}

// ---- Attention ----------------------------------------------------------------------------------

struct AttnRun {
  Vec out, dq, dk, dv;
};

struct AttnProblem {
  int64_t B, H, G, T, D;
  bool docs;
  float p;
  Vec q, k, v, dout;
  std::vector<int32_t> doc;

  AttnProblem(int64_t B_, int64_t H_, int64_t G_, int64_t T_, int64_t D_, bool docs_, float p_)
      : B(B_), H(H_), G(G_), T(T_), D(D_), docs(docs_), p(p_) {
    q = randn(B * H * T * D, 20);
    k = randn(B * G * T * D, 21);
    v = randn(B * G * T * D, 22);
    dout = randn(B * H * T * D, 23);
    doc.resize(B * T);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) doc[b * T + t] = static_cast<int32_t>(b == 0 ? t / 23 : (t < 50 ? 0 : 1));
  }
  const int32_t* doc_ids() const { return docs ? doc.data() : nullptr; }

  AttnRun run(bool flash, bool softmax_fusion, Vec* probs_out = nullptr) const {
    AttnRun r{Vec(q.size()), Vec(q.size(), NAN), Vec(k.size(), NAN), Vec(v.size(), NAN)};
    if (flash) {
      Vec lse(B * H * T), scratch(attention_flash_scratch_floats(B, H, G, T, D));
      attention_flash_forward(r.out.data(), lse.data(), q.data(), k.data(), v.data(), doc_ids(), B, H, G, T, D, p, 7,
                              scratch.data());
      attention_flash_backward(r.dq.data(), r.dk.data(), r.dv.data(), dout.data(), q.data(), k.data(), v.data(),
                               r.out.data(), lse.data(), doc_ids(), B, H, G, T, D, p, 7, scratch.data());
    } else {
      Vec probs(B * H * T * T), scratch(attention_unfused_scratch_floats(B, H, G, T, D));
      attention_unfused_forward(r.out.data(), probs.data(), q.data(), k.data(), v.data(), doc_ids(), B, H, G, T, D, p,
                                7, softmax_fusion, scratch.data());
      attention_unfused_backward(r.dq.data(), r.dk.data(), r.dv.data(), dout.data(), q.data(), k.data(), v.data(),
                                 probs.data(), doc_ids(), B, H, G, T, D, p, 7, scratch.data());
      if (probs_out) *probs_out = probs;
    }
    return r;
  }
};

// Two attention paths sum the same terms in other orders (flash: 64-wide
// tiles and an online softmax; unfused: whole rows; BLAS kernels split the
// GEMMs their own way), so an element whose terms cancel can differ by far
// more than u times its size: compare each tensor in the max norm. Bound: each
// path chains about six stages (Q K^T, softmax, P V; dP, dS, dS K / dS^T Q) of
// sums of at most T = 130 terms, each within gamma_130 = 7.7e-6 of its terms'
// size (test_util/fp32_bounds.h), so the paths differ by at most about
// 2 * 6 * gamma_130 ~ 1e-4 of a tensor's scale (kAttentionRtol).
const double kAttentionRtol = 2 * 6 * mtrain::testing::fp32_gamma(130);  // 9.3e-5

void expect_runs_close(const AttnRun& a, const AttnRun& b) {
  using mtrain::testing::close_in_max_norm;
  EXPECT_TRUE(close_in_max_norm(a.out.data(), b.out.data(), a.out.size(), kAttentionRtol)) << "out";
  EXPECT_TRUE(close_in_max_norm(a.dq.data(), b.dq.data(), a.dq.size(), kAttentionRtol)) << "dq";
  EXPECT_TRUE(close_in_max_norm(a.dk.data(), b.dk.data(), a.dk.size(), kAttentionRtol)) << "dk";
  EXPECT_TRUE(close_in_max_norm(a.dv.data(), b.dv.data(), a.dv.size(), kAttentionRtol)) << "dv";
}

TEST(Fusion, MaskedSoftmax) {
  for (bool docs : {false, true}) {
    AttnProblem pb(2, 4, 2, 67, 16, docs, 0.1f);
    Vec probs_fused, probs_plain;
    const AttnRun fused = pb.run(false, true, &probs_fused);
    const AttnRun plain = pb.run(false, false, &probs_plain);
    EXPECT_TRUE(all_close(probs_fused, probs_plain, 1e-7, 1e-5)) << "docs=" << docs;
    expect_runs_close(fused, plain);
  }
}

struct FlashCase {
  int64_t H, G, T;
  bool docs;
  float p;
};

class FlashVsUnfused : public ::testing::TestWithParam<FlashCase> {};

TEST_P(FlashVsUnfused, OutputsAndGradients) {
  const FlashCase c = GetParam();
  AttnProblem pb(2, c.H, c.G, c.T, 16, c.docs, c.p);
  expect_runs_close(pb.run(true, false), pb.run(false, true));
}

std::vector<FlashCase> flash_cases() {
  std::vector<FlashCase> cases;
  for (int64_t T : {67, 130, 64})
    for (auto [H, G] : {std::pair<int64_t, int64_t>{4, 2}, {2, 2}})
      for (bool docs : {false, true})
        for (float p : {0.0f, 0.1f}) cases.push_back({H, G, T, docs, p});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, FlashVsUnfused, ::testing::ValuesIn(flash_cases()),
                         [](const ::testing::TestParamInfo<FlashCase>& info) {
                           const FlashCase& c = info.param;
                           return std::string(c.H == c.G ? "mha" : "gqa") + "_T" + std::to_string(c.T) +
                                  (c.docs ? "_docs" : "_nodocs") + (c.p > 0.0f ? "_dropout" : "_nodropout");
                         });

}  // namespace
}  // namespace mtrain::kernels
