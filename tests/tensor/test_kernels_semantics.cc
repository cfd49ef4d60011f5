// The contract details the model code relies on: which outputs are
// OVERWRITTEN and which ACCUMULATED, the documented aliasing, and determinism
// (the same call twice gives the same bits; the column-sum and scatter
// kernels give the same bits for any thread count), and dropout masks that do
// not depend on sharding (index_offset, head_offset/total_heads).
#include <gtest/gtest.h>
#include <omp.h>

#include "common/errors.h"
#include "kernel_test_util.h"
#include "tensor/activation.h"
#include "tensor/attention.h"
#include "tensor/cross_entropy.h"
#include "tensor/embedding.h"
#include "tensor/linear.h"
#include "tensor/norm.h"
#include "tensor/precision.h"
#include "test_util/fp32_bounds.h"

namespace mtrain::kernels {
namespace {

using testing::all_close;
using testing::bit_equal;
using testing::randn;
using testing::Vec;

TEST(Semantics, LinearBackwardAccumulatesWeightsOverwritesInput) {
  const int64_t N = 40, C = 24, OC = 300;
  const Vec inp = randn(N * C, 1), weight = randn(OC * C, 2), dout = randn(N * OC, 3);
  Vec dinp(N * C, NAN), dweight(OC * C, 0.0f), dbias(OC, 0.0f);
  linear_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(), N, C, OC);
  const Vec dinp1 = dinp, dweight1 = dweight, dbias1 = dbias;
  linear_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(), N, C, OC);
  EXPECT_TRUE(bit_equal(dinp, dinp1)) << "dinp is overwritten";
  Vec twice_w(dweight1.size()), twice_b(dbias1.size());
  for (size_t i = 0; i < twice_w.size(); ++i) twice_w[i] = 2.0f * dweight1[i];
  for (size_t i = 0; i < twice_b.size(); ++i) twice_b[i] = 2.0f * dbias1[i];
  // A BLAS kernel may add the old value anywhere in its sum: each call is within
  // gamma_{N+1} * (terms' size A) of exact, so |dweight - 2 dweight1| <= 4 gamma_{N+1} A.
  std::vector<double> bound_w(OC * C, 0.0), bound_b(OC, 0.0);  // (OC, C), (OC)
  const double g4 = 4.0 * mtrain::testing::fp32_gamma(N + 1);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) {
      bound_b[o] += g4 * std::fabs(dout[n * OC + o]);
      for (int64_t c = 0; c < C; ++c) bound_w[o * C + c] += g4 * std::fabs(dout[n * OC + o] * inp[n * C + c]);
    }
  EXPECT_TRUE(mtrain::testing::within_bounds(dweight, twice_w, bound_w)) << "dweight accumulates";
  EXPECT_TRUE(mtrain::testing::within_bounds(dbias, twice_b, bound_b)) << "dbias accumulates";
  // Null dinp / dbias are skipped.
  Vec dweight3(OC * C, 0.0f);
  linear_backward(nullptr, dweight3.data(), nullptr, dout.data(), inp.data(), weight.data(), N, C, OC);
  EXPECT_TRUE(bit_equal(dweight3, dweight1));
}

TEST(Semantics, NormBackwardAccumulatesInput) {
  const int64_t N = 8, C = 40;
  const Vec inp = randn(N * C, 4), weight = randn(C, 5), bias = randn(C, 6), dout = randn(N * C, 7);
  const Vec prior = randn(N * C, 8), prior_w = randn(C, 9);
  Vec out(N * C), mean(N), rstd(N), scratch(rmsnorm_scratch_floats(N, C));
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C, 1e-5f);
  Vec d0(N * C, 0.0f), w0(C, 0.0f), b0(C, 0.0f), d1 = prior, w1 = prior_w, b1 = prior_w;
  layernorm_backward(d0.data(), w0.data(), b0.data(), dout.data(), inp.data(), weight.data(), mean.data(), rstd.data(),
                     N, C);
  layernorm_backward(d1.data(), w1.data(), b1.data(), dout.data(), inp.data(), weight.data(), mean.data(), rstd.data(),
                     N, C);
  for (int64_t i = 0; i < N * C; ++i) ASSERT_NEAR(d1[i], prior[i] + d0[i], 1e-5) << i;
  for (int64_t j = 0; j < C; ++j) {
    ASSERT_NEAR(w1[j], prior_w[j] + w0[j], 1e-5) << j;
    ASSERT_NEAR(b1[j], prior_w[j] + b0[j], 1e-5) << j;
  }
  for (bool fused : {true, false}) {
    rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), N, C, 1e-5f, fused, scratch.data());
    Vec e0(N * C, 0.0f), v0(C, 0.0f), e1 = prior, v1 = prior_w;
    rmsnorm_backward(e0.data(), v0.data(), dout.data(), inp.data(), weight.data(), rstd.data(), N, C, fused,
                     scratch.data());
    rmsnorm_backward(e1.data(), v1.data(), dout.data(), inp.data(), weight.data(), rstd.data(), N, C, fused,
                     scratch.data());
    for (int64_t i = 0; i < N * C; ++i) ASSERT_NEAR(e1[i], prior[i] + e0[i], 1e-5) << i;
    for (int64_t j = 0; j < C; ++j) ASSERT_NEAR(v1[j], prior_w[j] + v0[j], 1e-5) << j;
  }
}

TEST(Semantics, AttentionGradientsOverwritten) {
  const int64_t B = 2, H = 4, G = 2, T = 67, D = 8;
  const Vec q = randn(B * H * T * D, 10), k = randn(B * G * T * D, 11), v = randn(B * G * T * D, 12);
  const Vec dout = randn(q.size(), 13);
  Vec out(q.size()), lse(B * H * T), probs(B * H * T * T);
  Vec fs(attention_flash_scratch_floats(B, H, G, T, D)), us(attention_unfused_scratch_floats(B, H, G, T, D));
  for (bool flash : {true, false}) {
    Vec g[2][3];
    for (int rep = 0; rep < 2; ++rep) {
      const float fill = rep == 0 ? 0.0f : NAN;
      g[rep][0].assign(q.size(), fill);
      g[rep][1].assign(k.size(), fill);
      g[rep][2].assign(v.size(), fill);
      if (flash) {
        attention_flash_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), nullptr, B, H, G, T, D, 0.1f, 3,
                                fs.data());
        attention_flash_backward(g[rep][0].data(), g[rep][1].data(), g[rep][2].data(), dout.data(), q.data(), k.data(),
                                 v.data(), out.data(), lse.data(), nullptr, B, H, G, T, D, 0.1f, 3, fs.data());
      } else {
        attention_unfused_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), nullptr, B, H, G, T, D, 0.1f,
                                  3, true, us.data());
        attention_unfused_backward(g[rep][0].data(), g[rep][1].data(), g[rep][2].data(), dout.data(), q.data(),
                                   k.data(), v.data(), probs.data(), nullptr, B, H, G, T, D, 0.1f, 3, us.data());
      }
    }
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(bit_equal(g[0][i], g[1][i])) << "flash=" << flash << " grad " << i;
  }
}

TEST(Semantics, ActivationBiasGradAccumulates) {
  const int64_t N = 6, F = 10;
  const Vec inp = randn(N * 2 * F, 14), bias = randn(2 * F, 15), dout = randn(N * F, 16);
  for (bool fused : {true, false}) {
    Vec dinp(N * 2 * F), db0(2 * F, 0.0f), db1(2 * F, 3.0f), scratch(bias_swiglu_scratch_floats(N, F));
    bias_swiglu_backward(dinp.data(), db0.data(), dout.data(), inp.data(), bias.data(), N, F, fused, scratch.data());
    bias_swiglu_backward(dinp.data(), db1.data(), dout.data(), inp.data(), bias.data(), N, F, fused, scratch.data());
    for (int64_t j = 0; j < 2 * F; ++j) ASSERT_NEAR(db1[j], 3.0f + db0[j], 1e-5);
    Vec g0(N * F), gb0(F, 0.0f), gb1(F, -1.0f);
    bias_gelu_backward(g0.data(), gb0.data(), dout.data(), inp.data(), bias.data(), N, F, fused, scratch.data());
    bias_gelu_backward(g0.data(), gb1.data(), dout.data(), inp.data(), bias.data(), N, F, fused, scratch.data());
    for (int64_t j = 0; j < F; ++j) ASSERT_NEAR(gb1[j], -1.0f + gb0[j], 1e-5);
  }
}

// Runs fn under 1 and 2 OpenMP threads; fn returns the outputs to compare.
template <typename Fn>
void expect_thread_count_invariant(Fn fn, const char* what) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<Vec> one = fn();
  omp_set_num_threads(2);
  const std::vector<Vec> two = fn();
  const std::vector<Vec> again = fn();
  omp_set_num_threads(saved);
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_TRUE(bit_equal(one[i], two[i])) << what << " output " << i << ": 1 vs 2 threads";
    EXPECT_TRUE(bit_equal(two[i], again[i])) << what << " output " << i << ": run to run";
  }
}

TEST(Determinism, ColumnSumsAndScatterAnyThreadCount) {
  const int64_t N = 512, C = 700, V = 50;
  const Vec dout = randn(N * C, 17), inp = randn(N * C, 18), weight = randn(C, 19);
  std::vector<int32_t> tokens(N), positions(N);
  for (int64_t i = 0; i < N; ++i) {
    tokens[i] = static_cast<int32_t>((i * i) % V);  // many repeats
    positions[i] = static_cast<int32_t>(i % 64);
  }
  expect_thread_count_invariant(
      [&] {
        Vec dwte(V * C, 0.0f), dwpe(64 * C, 0.0f);
        embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), positions.data(), N, C);
        return std::vector<Vec>{dwte, dwpe};
      },
      "embedding_backward");
  expect_thread_count_invariant(
      [&] {
        Vec mean(N), rstd(N), out(N * C), dinp(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
        layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), weight.data(), N, C, 1e-5f);
        layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), weight.data(), mean.data(),
                           rstd.data(), N, C);
        return std::vector<Vec>{out, dinp, dw, db};
      },
      "layernorm");
  expect_thread_count_invariant(
      [&] {
        Vec dinp(N * C), db(C, 0.0f);
        bias_dropout_add_backward(dinp.data(), db.data(), dout.data(), N, C, 0.1f, 5);
        return std::vector<Vec>{dinp, db};
      },
      "bias_dropout_add_backward");
  expect_thread_count_invariant(
      [&] { return std::vector<Vec>{Vec{static_cast<float>(sum_squares(dout.data(), N * C))}}; }, "sum_squares");
}

TEST(Determinism, RepeatedCallsBitIdentical) {
  const int64_t B = 4, H = 4, G = 2, T = 130, D = 32;
  std::vector<int32_t> doc(B * T);
  for (int64_t i = 0; i < B * T; ++i) doc[i] = static_cast<int32_t>((i % T) / 50);
  const Vec q = randn(B * H * T * D, 20), k = randn(B * G * T * D, 21), v = randn(B * G * T * D, 22);
  const Vec dout = randn(q.size(), 23);
  auto run = [&](bool flash) {
    Vec out(q.size()), lse(B * H * T), probs(B * H * T * T), dq(q.size()), dk(k.size()), dv(v.size());
    Vec s(flash ? attention_flash_scratch_floats(B, H, G, T, D) : attention_unfused_scratch_floats(B, H, G, T, D));
    if (flash) {
      attention_flash_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), doc.data(), B, H, G, T, D, 0.1f, 9,
                              s.data());
      attention_flash_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(),
                               lse.data(), doc.data(), B, H, G, T, D, 0.1f, 9, s.data());
    } else {
      attention_unfused_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), doc.data(), B, H, G, T, D, 0.1f,
                                9, false, s.data());
      attention_unfused_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(),
                                 probs.data(), doc.data(), B, H, G, T, D, 0.1f, 9, s.data());
    }
    return std::vector<Vec>{out, dq, dk, dv};
  };
  for (bool flash : {true, false}) {
    const auto a = run(flash), b = run(flash);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(bit_equal(a[i], b[i])) << "flash=" << flash << " output " << i;
  }
  const int64_t N = 256, C = 512, OC = 384;
  const Vec x = randn(N * C, 24), w = randn(OC * C, 25), g = randn(N * OC, 26);
  auto lin = [&] {
    Vec out(N * OC), dx(N * C), dw(OC * C, 0.0f), db(OC, 0.0f);
    linear_forward(out.data(), x.data(), w.data(), w.data(), N, C, OC);
    linear_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), N, C, OC);
    return std::vector<Vec>{out, dx, dw, db};
  };
  const auto l1 = lin(), l2 = lin();
  for (size_t i = 0; i < l1.size(); ++i) EXPECT_TRUE(bit_equal(l1[i], l2[i])) << "linear output " << i;
}

// ---- Dropout masks independent of sharding -----------------------------------------------------

// Rows [row0, row0 + rows) of a row-major buffer with `cols` columns.
Vec rows_of(const Vec& x, int64_t row0, int64_t rows, int64_t cols) {
  return Vec(x.begin() + row0 * cols, x.begin() + (row0 + rows) * cols);
}

// Heads [h0, h0 + Hl) of a (B, H, T*D) buffer.
Vec heads_of(const Vec& x, int64_t B, int64_t H, int64_t h0, int64_t Hl, int64_t TD) {
  Vec out;
  for (int64_t b = 0; b < B; ++b)
    out.insert(out.end(), x.begin() + (b * H + h0) * TD, x.begin() + (b * H + h0 + Hl) * TD);
  return out;
}

// A token shard (rows [r*N/tp, (r+1)*N/tp)) numbered from row0 = r*(N/tp)
// draws exactly the mask of the same rows of the unsharded call.
TEST(ShardedDropout, IndexOffsetMatchesSliceOfFullRun) {
  const int64_t N = 48, C = 40, tp = 4, Nl = N / tp;
  const float p = 0.3f;
  const uint64_t seed = 99;
  const Vec inp = randn(N * C, 30), bias = randn(C, 31), residual = randn(N * C, 32), dout = randn(N * C, 33);
  for (bool fused : {true, false}) {
    Vec out(N * C), din(N * C), drop(N * C), ddrop(N * C), db(C, 0.0f), scratch(N * C);
    bias_dropout_add_forward(out.data(), inp.data(), bias.data(), residual.data(), N, C, p, seed, fused,
                             scratch.data());
    bias_dropout_add_backward(din.data(), db.data(), dout.data(), N, C, p, seed);
    dropout_forward(drop.data(), inp.data(), N, C, p, seed);
    dropout_backward(ddrop.data(), dout.data(), N, C, p, seed);
    for (int64_t r = 0; r < tp; ++r) {
      const TokenNumbering offset{r * Nl};
      const Vec x = rows_of(inp, r * Nl, Nl, C), res = rows_of(residual, r * Nl, Nl, C),
                g = rows_of(dout, r * Nl, Nl, C);
      Vec o(Nl * C), di(Nl * C), d(Nl * C), dd(Nl * C), dbl(C, 0.0f), naive(Nl * C);
      bias_dropout_add_forward(o.data(), x.data(), bias.data(), res.data(), Nl, C, p, seed, fused, scratch.data(),
                               offset);
      bias_dropout_add_backward(di.data(), dbl.data(), g.data(), Nl, C, p, seed, offset);
      dropout_forward(d.data(), x.data(), Nl, C, p, seed, offset);
      dropout_backward(dd.data(), g.data(), Nl, C, p, seed, offset);
      EXPECT_TRUE(bit_equal(o, rows_of(out, r * Nl, Nl, C))) << "bias_dropout_add fwd, fused=" << fused << " r=" << r;
      EXPECT_TRUE(bit_equal(di, rows_of(din, r * Nl, Nl, C))) << "bias_dropout_add bwd, r=" << r;
      EXPECT_TRUE(bit_equal(d, rows_of(drop, r * Nl, Nl, C))) << "dropout fwd, r=" << r;
      EXPECT_TRUE(bit_equal(dd, rows_of(ddrop, r * Nl, Nl, C))) << "dropout bwd, r=" << r;
      if (r > 0) {  // control: without the offset a shard draws the first rows' mask
        dropout_forward(naive.data(), x.data(), Nl, C, p, seed);
        EXPECT_FALSE(bit_equal(naive, d)) << "r=" << r;
      }
    }
  }
}

struct AttnOutputs {
  Vec out, dq, dk, dv;
};

AttnOutputs run_attention(bool flash, const Vec& q, const Vec& k, const Vec& v, const Vec& dout, int64_t B, int64_t H,
                          int64_t G, int64_t T, int64_t D, float p, int64_t head_offset, int64_t total_heads) {
  AttnOutputs r{Vec(q.size()), Vec(q.size()), Vec(k.size()), Vec(v.size())};
  if (flash) {
    Vec lse(B * H * T), s(attention_flash_scratch_floats(B, H, G, T, D));
    attention_flash_forward(r.out.data(), lse.data(), q.data(), k.data(), v.data(), nullptr, B, H, G, T, D, p, 5,
                            s.data(), head_offset, total_heads);
    attention_flash_backward(r.dq.data(), r.dk.data(), r.dv.data(), dout.data(), q.data(), k.data(), v.data(),
                             r.out.data(), lse.data(), nullptr, B, H, G, T, D, p, 5, s.data(), head_offset,
                             total_heads);
  } else {
    Vec probs(B * H * T * T), s(attention_unfused_scratch_floats(B, H, G, T, D));
    attention_unfused_forward(r.out.data(), probs.data(), q.data(), k.data(), v.data(), nullptr, B, H, G, T, D, p, 5,
                              true, s.data(), head_offset, total_heads);
    attention_unfused_backward(r.dq.data(), r.dk.data(), r.dv.data(), dout.data(), q.data(), k.data(), v.data(),
                               probs.data(), nullptr, B, H, G, T, D, p, 5, s.data(), head_offset, total_heads);
  }
  return r;
}

// A TP rank holding query heads [r*H/tp, ...) and key/value groups
// [r*G/tp, ...) with head_offset/total_heads reproduces the slice of the
// full run (same masks); same shapes per (b, h) pair, so to rounding only.
TEST(ShardedDropout, AttentionHeadOffsetMatchesSliceOfFullRun) {
  const int64_t B = 2, H = 8, G = 4, T = 70, D = 8, tp = 2, Hl = H / tp, Gl = G / tp;
  const float p = 0.2f;
  const Vec q = randn(B * H * T * D, 40), k = randn(B * G * T * D, 41), v = randn(B * G * T * D, 42);
  const Vec dout = randn(q.size(), 43);
  EXPECT_THROW(run_attention(true, q, k, v, dout, B, H, G, T, D, p, 1, H), Error);
  for (bool flash : {true, false}) {
    const AttnOutputs full = run_attention(flash, q, k, v, dout, B, H, G, T, D, p, 0, 0);
    for (int64_t r = 0; r < tp; ++r) {
      const Vec ql = heads_of(q, B, H, r * Hl, Hl, T * D), gl = heads_of(dout, B, H, r * Hl, Hl, T * D);
      const Vec kl = heads_of(k, B, G, r * Gl, Gl, T * D), vl = heads_of(v, B, G, r * Gl, Gl, T * D);
      const AttnOutputs shard = run_attention(flash, ql, kl, vl, gl, B, Hl, Gl, T, D, p, r * Hl, H);
      EXPECT_TRUE(all_close(shard.out, heads_of(full.out, B, H, r * Hl, Hl, T * D), 1e-6, 1e-6)) << flash << r;
      EXPECT_TRUE(all_close(shard.dq, heads_of(full.dq, B, H, r * Hl, Hl, T * D), 1e-6, 1e-6)) << flash << r;
      EXPECT_TRUE(all_close(shard.dk, heads_of(full.dk, B, G, r * Gl, Gl, T * D), 1e-6, 1e-6)) << flash << r;
      EXPECT_TRUE(all_close(shard.dv, heads_of(full.dv, B, G, r * Gl, Gl, T * D), 1e-6, 1e-6)) << flash << r;
      if (r > 0) {  // control: without the offsets the shard draws head 0's masks
        const AttnOutputs naive = run_attention(flash, ql, kl, vl, gl, B, Hl, Gl, T, D, p, 0, 0);
        EXPECT_FALSE(all_close(naive.out, shard.out, 1e-3, 1e-3)) << flash;
      }
    }
  }
}

}  // namespace
}  // namespace mtrain::kernels
