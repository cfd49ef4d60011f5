// Forward kernels against naive double-precision references written straight
// from the definitions (layouts, GQA head mapping, masks, dropout convention,
// rotary convention), so the FD checks are anchored to the right function.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>

#include "common/errors.h"
#include "kernel_test_util.h"
#include "tensor/activation.h"
#include "tensor/attention.h"
#include "tensor/attention_decode.h"
#include "tensor/cross_entropy.h"
#include "tensor/embedding.h"
#include "tensor/kernel_util.h"
#include "tensor/linear.h"
#include "tensor/norm.h"
#include "tensor/rope.h"
#include "test_util/fp32_bounds.h"

namespace mtrain::kernels {
namespace {

using testing::all_close;
using testing::randn;
using testing::Vec;

// The vectorisable exp used by every softmax: within 2 ulp of the double
// exp over its domain, exactly 0 for -inf and below -87.3, NaN kept.
TEST(Reference, SoftmaxExp) {
  int worst_ulp = 0;
  for (float x = -87.0f; x <= 80.0f; x += 0.000731f) {
    const float want = static_cast<float>(std::exp(static_cast<double>(x)));
    const float got = detail::softmax_exp(x);
    const int ulp = std::abs(std::bit_cast<int32_t>(got) - std::bit_cast<int32_t>(want));
    worst_ulp = std::max(worst_ulp, ulp);
    ASSERT_LE(ulp, 2) << "x=" << x << " got " << got << " want " << want;
  }
  EXPECT_GE(worst_ulp, 0);
  EXPECT_EQ(detail::softmax_exp(0.0f), 1.0f);
  EXPECT_EQ(detail::softmax_exp(-INFINITY), 0.0f);
  EXPECT_EQ(detail::softmax_exp(-100.0f), 0.0f);
  EXPECT_TRUE(std::isnan(detail::softmax_exp(NAN)));
}

// GEMM results against a double reference: |out - exact| <= gamma_K * sum|terms|
// in any summation order (any BLAS kernel, thread split or FMA), plus half an
// ulp for rounding the reference itself to float.
TEST(Reference, LinearAndSgemm) {
  const int64_t N = 37, C = 19, OC = 23;
  const Vec inp = randn(N * C, 1), weight = randn(OC * C, 2), bias = randn(OC, 3);
  Vec ref(N * OC), ref_nb(N * OC), out(N * OC), out_nb(N * OC), c(N * OC);
  std::vector<double> bound(N * OC), bound_nb(N * OC);  // (N, OC)
  for (int64_t i = 0; i < N; ++i)
    for (int64_t o = 0; o < OC; ++o) {
      double s = 0.0, a = 0.0;
      for (int64_t j = 0; j < C; ++j) {
        s += static_cast<double>(inp[i * C + j]) * weight[o * C + j];
        a += std::fabs(static_cast<double>(inp[i * C + j]) * weight[o * C + j]);
      }
      ref_nb[i * OC + o] = static_cast<float>(s);
      ref[i * OC + o] = static_cast<float>(s + bias[o]);
      bound_nb[i * OC + o] = mtrain::testing::fp32_gamma(C) * a + mtrain::testing::kFp32Unit * std::fabs(s);
      bound[i * OC + o] = mtrain::testing::fp32_gamma(C + 1) * (a + std::fabs(bias[o])) +
                          mtrain::testing::kFp32Unit * std::fabs(s + bias[o]);
    }
  linear_forward(out.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
  linear_forward(out_nb.data(), inp.data(), weight.data(), nullptr, N, C, OC);
  EXPECT_TRUE(mtrain::testing::within_bounds(out, ref, bound));
  EXPECT_TRUE(mtrain::testing::within_bounds(out_nb, ref_nb, bound_nb));
  // sgemm_nn: (N, C) · (C, OC) with b = weight^T laid out explicitly.
  Vec wt(C * OC);
  for (int64_t o = 0; o < OC; ++o)
    for (int64_t j = 0; j < C; ++j) wt[j * OC + o] = weight[o * C + j];
  sgemm_nn(c.data(), inp.data(), wt.data(), N, OC, C);
  EXPECT_TRUE(mtrain::testing::within_bounds(c, ref_nb, bound_nb));
}

TEST(Reference, Norms) {
  const int64_t N = 5, C = 33;
  const float eps = 1e-5f;
  const Vec inp = randn(N * C, 4, 3.0f), weight = randn(C, 5), bias = randn(C, 6);
  Vec ln_ref(N * C), rms_ref(N * C), rstd_ref(N);
  for (int64_t i = 0; i < N; ++i) {
    double m = 0.0, v = 0.0, ms = 0.0;
    for (int64_t j = 0; j < C; ++j) m += inp[i * C + j];
    m /= C;
    for (int64_t j = 0; j < C; ++j) {
      v += (inp[i * C + j] - m) * (inp[i * C + j] - m);
      ms += static_cast<double>(inp[i * C + j]) * inp[i * C + j];
    }
    const double rs = 1.0 / std::sqrt(v / C + eps), rr = 1.0 / std::sqrt(ms / C + eps);
    rstd_ref[i] = static_cast<float>(rr);
    for (int64_t j = 0; j < C; ++j) {
      ln_ref[i * C + j] = static_cast<float>((inp[i * C + j] - m) * rs * weight[j] + bias[j]);
      rms_ref[i * C + j] = static_cast<float>(inp[i * C + j] * rr * weight[j]);
    }
  }
  Vec out(N * C), mean(N), rstd(N), scratch(rmsnorm_scratch_floats(N, C));
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C, eps);
  EXPECT_TRUE(all_close(out, ln_ref, 1e-5, 1e-5));
  for (bool fused : {true, false}) {
    rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), N, C, eps, fused, scratch.data());
    EXPECT_TRUE(all_close(out, rms_ref, 1e-5, 1e-5)) << "fused=" << fused;
    EXPECT_TRUE(all_close(rstd, rstd_ref, 1e-6, 1e-6)) << "fused=" << fused;
  }
}

TEST(Reference, Activations) {
  const int64_t N = 4, F = 9;
  const Vec inp = randn(N * 2 * F, 7, 3.0f), bias = randn(2 * F, 8);
  Vec swiglu_ref(N * F), gelu_ref(N * F), gelu_nb_ref(N * F);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < F; ++j) {
      const double a = inp[i * 2 * F + j] + static_cast<double>(bias[j]);
      const double b = inp[i * 2 * F + F + j] + static_cast<double>(bias[F + j]);
      swiglu_ref[i * F + j] = static_cast<float>(a / (1.0 + std::exp(-a)) * b);
      auto gelu = [](double x) {
        return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
      };
      gelu_ref[i * F + j] = static_cast<float>(gelu(inp[i * F + j] + static_cast<double>(bias[j])));
      gelu_nb_ref[i * F + j] = static_cast<float>(gelu(inp[i * F + j]));
    }
  Vec out(N * F), scratch(bias_swiglu_scratch_floats(N, F));
  for (bool fused : {true, false}) {
    bias_swiglu_forward(out.data(), inp.data(), bias.data(), N, F, fused, scratch.data());
    EXPECT_TRUE(all_close(out, swiglu_ref, 1e-5, 1e-5)) << "swiglu fused=" << fused;
    bias_gelu_forward(out.data(), inp.data(), bias.data(), N, F, fused, scratch.data());
    EXPECT_TRUE(all_close(out, gelu_ref, 1e-5, 1e-5)) << "gelu fused=" << fused;
    bias_gelu_forward(out.data(), inp.data(), nullptr, N, F, fused, scratch.data());
    EXPECT_TRUE(all_close(out, gelu_nb_ref, 1e-5, 1e-5)) << "gelu no bias fused=" << fused;
  }
  float one = 1.0f, g1 = 0.0f;  // GPT-2's gelu(1) with the tanh approximation
  bias_gelu_forward(&g1, &one, nullptr, 1, 1, true, nullptr);
  EXPECT_NEAR(g1, 0.841192f, 1e-6f);
}

TEST(Reference, DropoutMaskConvention) {
  const int64_t N = 50, C = 40, n = N * C;
  const float p = 0.3f;
  const uint64_t seed = 4242;
  const Vec inp = randn(n, 9), bias = randn(C, 10), residual = randn(n, 11), dout = randn(n, 12);
  Vec out(n), din(n), scratch(n), dbias(C, 1.0f), bda(n), bda_din(n);
  dropout_forward(out.data(), inp.data(), 1, n, p, seed);
  dropout_backward(din.data(), dout.data(), 1, n, p, seed);
  bias_dropout_add_forward(bda.data(), inp.data(), bias.data(), residual.data(), N, C, p, seed, false, scratch.data());
  bias_dropout_add_backward(bda_din.data(), dbias.data(), dout.data(), N, C, p, seed);
  int64_t dropped = 0;
  Vec dbias_ref(C, 1.0f);
  for (int64_t e = 0; e < n; ++e) {
    const bool keep = uniform01(seed, static_cast<uint64_t>(e)) >= p;
    dropped += keep ? 0 : 1;
    const float scale = 1.0f / (1.0f - p);
    ASSERT_EQ(out[e], keep ? inp[e] * scale : 0.0f) << e;
    ASSERT_EQ(din[e], keep ? dout[e] * scale : 0.0f) << e;
    ASSERT_FLOAT_EQ(bda[e], residual[e] + (keep ? (inp[e] + bias[e % C]) * scale : 0.0f)) << e;
    ASSERT_EQ(bda_din[e], din[e]) << e;
    dbias_ref[e % C] += bda_din[e];
  }
  EXPECT_NEAR(static_cast<double>(dropped) / n, p, 0.03);
  EXPECT_TRUE(all_close(dbias, dbias_ref, 1e-5, 1e-5));
  // p == 0 is an exact identity.
  dropout_forward(out.data(), inp.data(), 1, n, 0.0f, seed);
  EXPECT_TRUE(testing::bit_equal(out, inp));
}

TEST(Reference, Embedding) {
  const int64_t V = 5, P = 4, C = 3, N = 6;
  const std::vector<int32_t> tokens = {4, 0, 4, 2, 4, 1}, positions = {0, 1, 2, 3, 0, 1};
  const Vec wte = randn(V * C, 13), wpe = randn(P * C, 14), dout = randn(N * C, 15);
  Vec out(N * C), dwte(V * C, 0.5f), dwpe(P * C, 0.0f);
  embedding_forward(out.data(), tokens.data(), positions.data(), wte.data(), wpe.data(), N, C);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < C; ++j) ASSERT_EQ(out[i * C + j], wte[tokens[i] * C + j] + wpe[positions[i] * C + j]);
  embedding_forward(out.data(), tokens.data(), nullptr, wte.data(), nullptr, N, C);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < C; ++j) ASSERT_EQ(out[i * C + j], wte[tokens[i] * C + j]);
  embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), positions.data(), N, C);
  for (int64_t j = 0; j < C; ++j) {  // token 4 appears at rows 0, 2, 4; token 3 never (keeps its 0.5)
    EXPECT_FLOAT_EQ(dwte[4 * C + j], 0.5f + dout[0 * C + j] + dout[2 * C + j] + dout[4 * C + j]);
    EXPECT_EQ(dwte[3 * C + j], 0.5f);
    EXPECT_FLOAT_EQ(dwpe[0 * C + j], dout[0 * C + j] + dout[4 * C + j]);
  }
}

TEST(Reference, RopeRotateHalfConvention) {
  const int64_t B = 1, H = 2, T = 3, D = 8, half = D / 2;
  const float base = 10000.0f;
  const std::vector<int32_t> positions = {0, 7, 1000};
  const Vec x0 = randn(B * H * T * D, 16);
  Vec ref(x0.size()), scratch(rope_scratch_floats(B, H, T, D));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < half; ++i) {
        const double ang = positions[t] * std::pow(static_cast<double>(base), -2.0 * i / D);
        const int64_t r = (h * T + t) * D;
        ref[r + i] = static_cast<float>(x0[r + i] * std::cos(ang) - x0[r + i + half] * std::sin(ang));
        ref[r + i + half] = static_cast<float>(x0[r + i + half] * std::cos(ang) + x0[r + i] * std::sin(ang));
      }
  for (bool fused : {true, false}) {
    Vec x = x0;
    rope_forward(x.data(), positions.data(), B, H, T, D, base, fused, scratch.data());
    EXPECT_TRUE(all_close(x, ref, 1e-5, 1e-5)) << "fused=" << fused;
    for (int64_t j = 0; j < D; ++j) EXPECT_EQ(x[j], x0[j]) << "position 0 is the identity";
  }
}

// PyTorch's cross_entropy in fp64, with the padded columns [Vr, V) masked to
// -inf as `logits[:, Vr:] = -inf` would (Vr == V: Megatron's unmasked row):
// loss, (max, lse), and the gradient dlosses * (softmax - onehot), exactly 0
// in the padded columns. The padded logits are the largest of their rows, so
// letting any of them into the softmax would move every number.
TEST(Reference, CrossEntropy) {
  const int64_t N = 4, V = 11;
  for (const int64_t Vr : {V, int64_t{7}}) {
    Vec logits = randn(N * V, 17, 4.0f);
    logits[1 * V + 3] = 3e4f;  // a huge logit must not overflow (max subtraction)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = Vr; j < V; ++j) logits[i * V + j] = 20.0f;
    const std::vector<int32_t> targets = {0, 3, static_cast<int32_t>(Vr - 1), 5};
    const Vec dlosses = {0.5f, -1.0f, 2.0f, 1.0f};
    Vec losses(N), stats(2 * N), scratch(N * V), dlogits(N * V, NAN);
    for (bool fused : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "Vr=" << Vr << " fused=" << fused);
      cross_entropy_forward(losses.data(), stats.data(), logits.data(), targets.data(), N, V, Vr, fused,
                            scratch.data());
      cross_entropy_backward(dlogits.data(), logits.data(), stats.data(), targets.data(), dlosses.data(), N, V, Vr,
                             fused, scratch.data());
      for (int64_t i = 0; i < N; ++i) {
        double m = -INFINITY, s = 0.0;
        for (int64_t j = 0; j < Vr; ++j) m = std::fmax(m, logits[i * V + j]);
        for (int64_t j = 0; j < Vr; ++j) s += std::exp(static_cast<double>(logits[i * V + j]) - m);
        const double lse = m + std::log(s);
        EXPECT_NEAR(losses[i], lse - logits[i * V + targets[i]], 2e-5 * (1.0 + std::fabs(lse))) << i;
        EXPECT_FLOAT_EQ(stats[2 * i], static_cast<float>(m));
        EXPECT_NEAR(stats[2 * i + 1], lse, 2e-5 * (1.0 + std::fabs(lse)));
        // p = exp(x - lse): fp32 rounding of x - lse (magnitude <= |lse| + |x|) and of the exp.
        for (int64_t j = 0; j < Vr; ++j) {
          const double p = std::exp(logits[i * V + j] - lse), want = dlosses[i] * (p - (j == targets[i] ? 1 : 0));
          EXPECT_NEAR(dlogits[i * V + j], want, std::fabs(dlosses[i]) * (p * 1e-6 * (1.0 + std::fabs(lse)) + 1e-7))
              << i << "," << j;
        }
        for (int64_t j = Vr; j < V; ++j) EXPECT_EQ(dlogits[i * V + j], 0.0f) << "padded column " << i << "," << j;
      }
    }
  }
}

TEST(Reference, QkvSplitLayout) {
  const int64_t B = 2, T = 3, G = 2, R = 3, D = 2, H = G * R, W = G * (R + 2) * D;
  Vec qkv(B * T * W);
  for (size_t e = 0; e < qkv.size(); ++e) qkv[e] = static_cast<float>(e);
  Vec q(B * H * T * D), k(B * G * T * D), v(B * G * T * D), merged(B * T * H * D);
  qkv_split_forward(q.data(), k.data(), v.data(), qkv.data(), B, T, G, R, D);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t g = 0; g < G; ++g)
        for (int64_t d = 0; d < D; ++d) {
          const int64_t row = (b * T + t) * W + g * (R + 2) * D;
          for (int64_t r = 0; r < R; ++r) ASSERT_EQ(q[((b * H + g * R + r) * T + t) * D + d], qkv[row + r * D + d]);
          ASSERT_EQ(k[((b * G + g) * T + t) * D + d], qkv[row + R * D + d]);
          ASSERT_EQ(v[((b * G + g) * T + t) * D + d], qkv[row + (R + 1) * D + d]);
        }
  heads_merge_forward(merged.data(), q.data(), B, H, T, D);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d)
          ASSERT_EQ(merged[(b * T + t) * H * D + h * D + d], q[((b * H + h) * T + t) * D + d]);
}

// Naive attention in double: causal + doc mask, GQA head h -> group h / (H/G),
// dropout on the flattened (b, h, tq, tk) index after the softmax.
struct AttentionRef {
  Vec out, probs, lse;                                  // (B, H, T, D), (B, H, T, T), (B, H, T)
  std::vector<double> out_terms, row_err, probs_bound;  // sum p z |v|; relative error bound per row
};

// Rounding bound of an fp32 evaluation in any order (test_util/fp32_bounds.h):
// a score q.k / sqrt(D) is off by at most gamma_{D+2} sum|q k| / sqrt(D), which
// changes exp(s - max) by that relative amount (twice: the score and the
// max); the row sum and P V add gamma_T each; exp, scaling and division a few
// u. row_err is that relative bound on each probability of the row.
AttentionRef attention_reference(const Vec& q, const Vec& k, const Vec& v, const int32_t* doc, int64_t B, int64_t H,
                                 int64_t G, int64_t T, int64_t D, float p, uint64_t seed) {
  using mtrain::testing::fp32_gamma;
  using mtrain::testing::kFp32Unit;
  AttentionRef r{Vec(q.size()),
                 Vec(B * H * T * T),
                 Vec(B * H * T),
                 std::vector<double>(q.size()),
                 std::vector<double>(B * H * T),
                 std::vector<double>(B * H * T * T)};
  const int64_t R = H / G;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kv = b * G + h / R, pair = b * H + h;
      for (int64_t tq = 0; tq < T; ++tq) {
        std::vector<double> s(T, -INFINITY);
        double m = -INFINITY, sum = 0.0, score_err = 0.0;
        for (int64_t tk = 0; tk <= tq; ++tk) {
          if (doc && doc[b * T + tk] != doc[b * T + tq]) continue;
          double d = 0.0, a = 0.0;
          for (int64_t c = 0; c < D; ++c) {
            d += static_cast<double>(q[(pair * T + tq) * D + c]) * k[(kv * T + tk) * D + c];
            a += std::fabs(static_cast<double>(q[(pair * T + tq) * D + c]) * k[(kv * T + tk) * D + c]);
          }
          s[tk] = d / std::sqrt(static_cast<double>(D));
          score_err = std::fmax(score_err, fp32_gamma(D + 2) * a / std::sqrt(static_cast<double>(D)));
          m = std::fmax(m, s[tk]);
        }
        for (int64_t tk = 0; tk < T; ++tk) sum += std::exp(s[tk] - m);
        const int64_t row = pair * T + tq;
        const double err = 2.0 * score_err + 2.0 * fp32_gamma(T) + 8.0 * kFp32Unit;
        r.row_err[row] = err;
        r.lse[row] = static_cast<float>(m + std::log(sum));
        std::vector<double> acc(D, 0.0);
        for (int64_t tk = 0; tk < T; ++tk) {
          const double prob = std::exp(s[tk] - m) / sum;
          r.probs[row * T + tk] = static_cast<float>(prob);
          r.probs_bound[row * T + tk] = prob * (err + kFp32Unit);
          const uint64_t idx = static_cast<uint64_t>(((b * H + h) * T + tq) * T + tk);
          const double z = p > 0.0f ? (uniform01(seed, idx) >= p ? 1.0 / (1.0 - p) : 0.0) : 1.0;
          for (int64_t c = 0; c < D; ++c) {
            acc[c] += prob * z * v[(kv * T + tk) * D + c];
            r.out_terms[row * D + c] += prob * z * std::fabs(static_cast<double>(v[(kv * T + tk) * D + c]));
          }
        }
        for (int64_t c = 0; c < D; ++c) r.out[row * D + c] = static_cast<float>(acc[c]);
      }
    }
  return r;
}

// Per element: |out - ref| <= row_err * sum p z |v| + half an ulp of ref.
std::vector<double> out_bound(const AttentionRef& r, int64_t D) {
  std::vector<double> bound(r.out.size());
  for (size_t i = 0; i < bound.size(); ++i)
    bound[i] = r.row_err[i / D] * r.out_terms[i] + mtrain::testing::kFp32Unit * std::fabs(r.out[i]);
  return bound;
}

// lse = max + log(sum): off by the score error twice plus gamma_T, absolutely.
std::vector<double> lse_bound(const AttentionRef& r) {
  std::vector<double> bound(r.lse.size());
  for (size_t i = 0; i < bound.size(); ++i)
    bound[i] = r.row_err[i] + 2.0 * mtrain::testing::kFp32Unit * std::fabs(r.lse[i]);
  return bound;
}

TEST(Reference, Attention) {
  using mtrain::testing::within_bounds;
  const int64_t B = 2, T = 70, D = 8;
  std::vector<int32_t> doc(B * T);
  for (int64_t t = 0; t < T; ++t) doc[t] = doc[T + t] = static_cast<int32_t>(t / 30);
  doc[T + 5] = 9;  // a document id that appears once, in the middle
  for (auto [H, G] : {std::pair<int64_t, int64_t>{4, 2}, {4, 1}, {2, 2}})
    for (bool docs : {false, true})
      for (float p : {0.0f, 0.2f}) {
        const int32_t* d = docs ? doc.data() : nullptr;
        const Vec q = randn(B * H * T * D, 20), k = randn(B * G * T * D, 21), v = randn(B * G * T * D, 22);
        const AttentionRef ref = attention_reference(q, k, v, d, B, H, G, T, D, p, 31);
        const std::vector<double> ob = out_bound(ref, D);
        Vec out(q.size()), probs(B * H * T * T), lse(B * H * T);
        Vec scratch(attention_unfused_scratch_floats(B, H, G, T, D));
        for (bool fusion : {true, false}) {
          attention_unfused_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), d, B, H, G, T, D, p, 31,
                                    fusion, scratch.data());
          EXPECT_TRUE(within_bounds(out, ref.out, ob)) << H << "/" << G << " docs=" << docs << " p=" << p;
          EXPECT_TRUE(within_bounds(probs, ref.probs, ref.probs_bound)) << "probs are saved before dropout";
        }
        Vec fscratch(attention_flash_scratch_floats(B, H, G, T, D));
        attention_flash_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), d, B, H, G, T, D, p, 31,
                                fscratch.data());
        EXPECT_TRUE(within_bounds(out, ref.out, ob)) << "flash " << H << "/" << G << " docs=" << docs;
        EXPECT_TRUE(within_bounds(lse, ref.lse, lse_bound(ref))) << "flash lse";
      }
}

// Decoding with a KV cache: a prefill of 60 tokens, then 9 steps of one token
// and one of 1, each step's query rows equal the causal attention of the
// whole sequence at those positions (the same bound as above).
TEST(Reference, AttentionDecodeWithCache) {
  using mtrain::testing::within_bounds;
  const int64_t T = 70, D = 8, capacity = 80;
  for (auto [H, G] : {std::pair<int64_t, int64_t>{4, 2}, {4, 1}, {2, 2}}) {
    const Vec q = randn(H * T * D, 40), k = randn(G * T * D, 41), v = randn(G * T * D, 42);
    const AttentionRef ref = attention_reference(q, k, v, nullptr, 1, H, G, T, D, 0.0f, 0);
    const std::vector<double> ob = out_bound(ref, D);
    Vec k_cache(G * capacity * D), v_cache(G * capacity * D), scores(capacity);
    // (heads, T, D) rows [first, first + n) as a contiguous (heads, n, D) block.
    const auto rows = [&](const Vec& x, int64_t heads, int64_t first, int64_t n) {
      Vec out(heads * n * D);
      for (int64_t h = 0; h < heads; ++h) std::copy_n(x.begin() + (h * T + first) * D, n * D, out.begin() + h * n * D);
      return out;
    };
    std::vector<int64_t> steps = {60};
    for (int i = 0; i < 10; ++i) steps.push_back(1);
    int64_t past = 0;
    for (int64_t n : steps) {
      Vec out(H * n * D);
      attention_decode_forward(out.data(), rows(q, H, past, n).data(), rows(k, G, past, n).data(),
                               rows(v, G, past, n).data(), k_cache.data(), v_cache.data(), H, G, n, past, capacity, D,
                               scores.data());
      const Vec expect = rows(ref.out, H, past, n);
      std::vector<double> bound(out.size());
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < n * D; ++i) bound[h * n * D + i] = ob[(h * T + past) * D + i];
      EXPECT_TRUE(within_bounds(out, expect, bound)) << H << "/" << G << " past " << past;
      past += n;
    }
    Vec out(H * D);
    EXPECT_THROW(attention_decode_forward(out.data(), q.data(), k.data(), v.data(), k_cache.data(), v_cache.data(), H,
                                          G, 11, past, capacity, D, scores.data()),
                 Error);  // 70 cached + 11 > capacity 80
  }
}

}  // namespace
}  // namespace mtrain::kernels
