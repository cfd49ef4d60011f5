// Tensor-parallel linears (parallel/tensor_parallel.h) against the unsharded
// single-device kernels: a reference layer with seeded random weights is
// sharded over tp = 2 and 4 simulated ranks (SimWorld), with sequence
// parallelism off and on, gradient-accumulation fusion on and off, with and
// without bias, and every output and gradient of every rank is compared with
// the matching slice of the reference within fp32 rounding (|a - b| <= 1e-6 +
// 1e-5 * max(|a|, |b|), tensor_parallel_test_util.h). Also: a TP group of one
// gives the single-device kernels' exact bits (every layer), and bad calls
// throw. The vocab-parallel layers are in test_tensor_parallel_vocab.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/errors.h"
#include "parallel/local_comm.h"
#include "parallel/tensor_parallel.h"
#include "tensor/activation.h"
#include "tensor/cross_entropy.h"
#include "tensor/embedding.h"
#include "tensor/linear.h"
#include "tensor_parallel_test_util.h"

namespace mtrain::parallel {
namespace {

using kernels::testing::bit_equal;
using kernels::testing::randn;
using kernels::testing::Vec;
using tp_testing::cols;
using tp_testing::kVocab;
using tp_testing::ptr;
using tp_testing::rows;
using tp_testing::run_tp;
using tp_testing::token_ids;
using tp_testing::tp_close;

struct LinearCase {
  int tp;
  bool sp, fused_grad, bias;
};
void PrintTo(const LinearCase& c, std::ostream* os) {
  *os << "tp=" << c.tp << " sp=" << c.sp << " fused_grad=" << c.fused_grad << " bias=" << c.bias;
}

class ParallelTensorParallelLinear : public ::testing::TestWithParam<LinearCase> {};

// ColumnParallelLinear: W rows (output features) sharded; prior gradients present (the backward accumulates).
TEST_P(ParallelTensorParallelLinear, ColumnMatchesReference) {
  const LinearCase c = GetParam();
  const int64_t N = 24, C = 20, OC = 32, OCl = OC / c.tp, Nl = N / c.tp;
  const Vec x = randn(N * C, 1), w = randn(OC * C, 2, 0.3f), b = c.bias ? randn(OC, 3) : Vec{};
  const Vec dy = randn(N * OC, 4), dw0 = randn(OC * C, 5), db0 = c.bias ? randn(OC, 6) : Vec{};
  Vec y(N * OC), dx(N * C), dw = dw0, db = db0;
  kernels::linear_forward(y.data(), x.data(), w.data(), ptr(b), N, C, OC);
  kernels::linear_backward(dx.data(), dw.data(), ptr(db), dy.data(), x.data(), w.data(), N, C, OC);

  struct Out {
    Vec y, dx, dw, db;
  };
  std::vector<Out> out(c.tp);
  std::vector<std::vector<CommOp>> ops;
  run_tp(c.tp, ops, [&](int r, Comm& comm) {
    const TpConfig tp{&comm, c.sp};
    const Vec wl = rows(w, r * OCl, OCl, C), bl = c.bias ? rows(b, r * OCl, OCl, 1) : Vec{};
    const Vec dyl = cols(dy, N, OC, r * OCl, OCl);
    Vec xin = c.sp ? rows(x, r * Nl, Nl, C) : x;
    Vec x_full(N * C), dx_full(N * C), scratch(c.fused_grad ? 0 : OCl * C, NAN);
    Out& o = out[r];
    o.y.assign(N * OCl, NAN);
    o.dx.assign(xin.size(), NAN);
    o.dw = rows(dw0, r * OCl, OCl, C);
    o.db = c.bias ? rows(db0, r * OCl, OCl, 1) : Vec{};
    const float* xf = c.sp ? x_full.data() : xin.data();
    column_parallel_linear_forward(tp, o.y.data(), c.sp ? x_full.data() : xin.data(), xin.data(), wl.data(), ptr(bl), N,
                                   C, OCl);
    column_parallel_linear_backward(tp, o.dx.data(), c.sp ? dx_full.data() : nullptr, o.dw.data(), ptr(o.db),
                                    dyl.data(), xf, wl.data(), N, C, OCl, c.fused_grad, ptr(scratch));
  });
  for (int r = 0; r < c.tp; ++r) {
    EXPECT_TRUE(tp_close(out[r].y, cols(y, N, OC, r * OCl, OCl))) << "y rank " << r;
    EXPECT_TRUE(tp_close(out[r].dx, c.sp ? rows(dx, r * Nl, Nl, C) : dx)) << "dx rank " << r;
    EXPECT_TRUE(tp_close(out[r].dw, rows(dw, r * OCl, OCl, C))) << "dw rank " << r;
    if (c.bias) {
      EXPECT_TRUE(tp_close(out[r].db, rows(db, r * OCl, OCl, 1))) << "db rank " << r;
    }
    const std::vector<CommOp> want =
        c.sp ? std::vector{CommOp::kAllGather, CommOp::kReduceScatter} : std::vector{CommOp::kAllReduce};
    EXPECT_EQ(ops[r], want) << "rank " << r;
  }
}

// RowParallelLinear: W columns (input features) sharded. With a bias, the caller adds it after the reduction
// (skip_bias_add); under SP its gradient is the column sum over the token shard, all-reduced over TP.
TEST_P(ParallelTensorParallelLinear, RowMatchesReference) {
  const LinearCase c = GetParam();
  const int64_t N = 24, IC = 32, OC = 20, ICl = IC / c.tp, Nl = N / c.tp;
  const Vec x = randn(N * IC, 11), w = randn(OC * IC, 12, 0.3f), b = c.bias ? randn(OC, 13) : Vec{};
  const Vec dy = randn(N * OC, 14), dw0 = randn(OC * IC, 15);
  Vec y(N * OC), dx(N * IC), dw = dw0, db(OC, 0.0f);
  kernels::linear_forward(y.data(), x.data(), w.data(), ptr(b), N, IC, OC);
  kernels::linear_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, IC, OC);

  struct Out {
    Vec y, dx, dw, db;
  };
  std::vector<Out> out(c.tp);
  std::vector<std::vector<CommOp>> ops;
  run_tp(c.tp, ops, [&](int r, Comm& comm) {
    const TpConfig tp{&comm, c.sp};
    const Vec xl = cols(x, N, IC, r * ICl, ICl), wl = cols(w, OC, IC, r * ICl, ICl);
    const Vec dyin = c.sp ? rows(dy, r * Nl, Nl, OC) : dy;
    const int64_t ntok = c.sp ? Nl : N;
    Vec y_full(N * OC), dy_full(N * OC), scratch(c.fused_grad ? 0 : OC * ICl, NAN);
    Out& o = out[r];
    o.y.assign(ntok * OC, NAN);
    o.dx.assign(N * ICl, NAN);
    o.dw = cols(dw0, OC, IC, r * ICl, ICl);
    o.db.assign(OC, 0.0f);
    row_parallel_linear_forward(tp, o.y.data(), c.sp ? y_full.data() : nullptr, xl.data(), wl.data(), N, ICl, OC);
    if (c.bias) {  // the caller's bias add and its gradient
      for (int64_t i = 0; i < ntok; ++i)
        for (int64_t j = 0; j < OC; ++j) o.y[i * OC + j] += b[j];
      for (int64_t i = 0; i < ntok; ++i)
        for (int64_t j = 0; j < OC; ++j) o.db[j] += dyin[i * OC + j];
      if (c.sp) comm.all_reduce_sum(o.db.data(), OC);
    }
    row_parallel_linear_backward(tp, o.dx.data(), o.dw.data(), c.sp ? dy_full.data() : nullptr, dyin.data(), xl.data(),
                                 wl.data(), N, ICl, OC, c.fused_grad, ptr(scratch));
  });
  for (int r = 0; r < c.tp; ++r) {
    EXPECT_TRUE(tp_close(out[r].y, c.sp ? rows(y, r * Nl, Nl, OC) : y)) << "y rank " << r;
    EXPECT_TRUE(tp_close(out[r].dx, cols(dx, N, IC, r * ICl, ICl))) << "dx rank " << r;
    EXPECT_TRUE(tp_close(out[r].dw, cols(dw, OC, IC, r * ICl, ICl))) << "dw rank " << r;
    if (c.bias) {
      EXPECT_TRUE(tp_close(out[r].db, db)) << "db rank " << r;
    }
    std::vector<CommOp> want = c.sp ? std::vector{CommOp::kReduceScatter} : std::vector{CommOp::kAllReduce};
    if (c.sp && c.bias) want.push_back(CommOp::kAllReduce);
    if (c.sp) want.push_back(CommOp::kAllGather);
    EXPECT_EQ(ops[r], want) << "rank " << r;
  }
}

// Megatron's MLP: column (C -> F, bias) -> GELU -> row (F -> C); loss = sum(out * G).
TEST_P(ParallelTensorParallelLinear, MlpBlockMatchesReference) {
  const LinearCase c = GetParam();
  const int64_t N = 16, C = 24, F = 48, Fl = F / c.tp, Nl = N / c.tp;
  const Vec x = randn(N * C, 21), w1 = randn(F * C, 22, 0.3f), b1 = c.bias ? randn(F, 23) : Vec{};
  const Vec w2 = randn(C * F, 24, 0.2f), g = randn(N * C, 25);
  Vec h(N * F), a(N * F), y(N * C), da(N * F), dh(N * F), dx(N * C), dw1(F * C, 0.0f), db1(F, 0.0f), dw2(C * F, 0.0f);
  kernels::linear_forward(h.data(), x.data(), w1.data(), ptr(b1), N, C, F);
  kernels::bias_gelu_forward(a.data(), h.data(), nullptr, N, F, true, nullptr);
  kernels::linear_forward(y.data(), a.data(), w2.data(), nullptr, N, F, C);
  kernels::linear_backward(da.data(), dw2.data(), nullptr, g.data(), a.data(), w2.data(), N, F, C);
  kernels::bias_gelu_backward(dh.data(), nullptr, da.data(), h.data(), nullptr, N, F, true, nullptr);
  kernels::linear_backward(dx.data(), dw1.data(), ptr(db1), dh.data(), x.data(), w1.data(), N, C, F);

  struct Out {
    Vec y, dx, dw1, db1, dw2;
  };
  std::vector<Out> out(c.tp);
  std::vector<std::vector<CommOp>> ops;
  run_tp(c.tp, ops, [&](int r, Comm& comm) {
    const TpConfig tp{&comm, c.sp};
    const Vec w1l = rows(w1, r * Fl, Fl, C), b1l = c.bias ? rows(b1, r * Fl, Fl, 1) : Vec{};
    const Vec w2l = cols(w2, C, F, r * Fl, Fl);
    Vec xin = c.sp ? rows(x, r * Nl, Nl, C) : x, gin = c.sp ? rows(g, r * Nl, Nl, C) : g;
    Vec full(N * C), hl(N * Fl), al(N * Fl), dal(N * Fl), dhl(N * Fl), scratch(F * C);
    Out& o = out[r];
    o.y.resize(gin.size());
    o.dx.resize(xin.size());
    o.dw1.assign(Fl * C, 0.0f);
    o.db1.assign(c.bias ? Fl : 0, 0.0f);
    o.dw2.assign(C * Fl, 0.0f);
    float* x_full = c.sp ? full.data() : xin.data();  // kept for the backward (no recompute here)
    column_parallel_linear_forward(tp, hl.data(), x_full, xin.data(), w1l.data(), ptr(b1l), N, C, Fl);
    Vec x_saved(x_full, x_full + N * C);
    kernels::bias_gelu_forward(al.data(), hl.data(), nullptr, N, Fl, true, nullptr);
    row_parallel_linear_forward(tp, o.y.data(), full.data(), al.data(), w2l.data(), N, Fl, C);
    row_parallel_linear_backward(tp, dal.data(), o.dw2.data(), full.data(), gin.data(), al.data(), w2l.data(), N, Fl, C,
                                 c.fused_grad, scratch.data());
    kernels::bias_gelu_backward(dhl.data(), nullptr, dal.data(), hl.data(), nullptr, N, Fl, true, nullptr);
    column_parallel_linear_backward(tp, o.dx.data(), full.data(), o.dw1.data(), ptr(o.db1), dhl.data(), x_saved.data(),
                                    w1l.data(), N, C, Fl, c.fused_grad, scratch.data());
  });
  for (int r = 0; r < c.tp; ++r) {
    EXPECT_TRUE(tp_close(out[r].y, c.sp ? rows(y, r * Nl, Nl, C) : y)) << "y rank " << r;
    EXPECT_TRUE(tp_close(out[r].dx, c.sp ? rows(dx, r * Nl, Nl, C) : dx)) << "dx rank " << r;
    EXPECT_TRUE(tp_close(out[r].dw1, rows(dw1, r * Fl, Fl, C))) << "dw1 rank " << r;
    if (c.bias) {
      EXPECT_TRUE(tp_close(out[r].db1, rows(db1, r * Fl, Fl, 1))) << "db1 rank " << r;
    }
    EXPECT_TRUE(tp_close(out[r].dw2, cols(dw2, C, F, r * Fl, Fl))) << "dw2 rank " << r;
  }
}

std::vector<LinearCase> linear_cases() {
  std::vector<LinearCase> cases;
  for (int tp : {2, 4})
    for (bool sp : {false, true})
      for (bool fused_grad : {true, false})
        for (bool bias : {true, false}) cases.push_back({tp, sp, fused_grad, bias});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, ParallelTensorParallelLinear, ::testing::ValuesIn(linear_cases()),
                         [](const ::testing::TestParamInfo<LinearCase>& info) {
                           const LinearCase& c = info.param;
                           return "tp" + std::to_string(c.tp) + (c.sp ? "_sp" : "_nosp") +
                                  (c.fused_grad ? "_fusedgrad" : "_scratchgrad") + (c.bias ? "_bias" : "_nobias");
                         });

// ---- A group of one: the single-device kernels' bits; bad calls ---------------------------------

TEST(ParallelTensorParallel, SizeOneIsBitIdenticalToKernels) {
  const int64_t N = 12, C = 16, OC = 24, V = kVocab;
  const Vec x = randn(N * C, 61), w = randn(OC * C, 62), b = randn(OC, 63), dy = randn(N * OC, 64);
  const Vec wte = randn(V * C, 65), logits = randn(N * V, 66, 2.0f), dl = randn(N, 67);
  const std::vector<int32_t> tok = token_ids(N, 3, 1);
  SelfComm self("tp");
  for (const TpConfig tp : {TpConfig{nullptr, false}, TpConfig{&self, true}}) {
    Vec y1(N * OC), y2(N * OC), dx1(N * C), dx2(N * C), dw1(OC * C, 0.5f), dw2 = dw1, db1(OC, 0.5f), db2 = db1;
    kernels::linear_forward(y1.data(), x.data(), w.data(), b.data(), N, C, OC);
    column_parallel_linear_forward(tp, y2.data(), const_cast<float*>(x.data()), x.data(), w.data(), b.data(), N, C, OC);
    EXPECT_TRUE(bit_equal(y1, y2));
    kernels::linear_backward(dx1.data(), dw1.data(), db1.data(), dy.data(), x.data(), w.data(), N, C, OC);
    column_parallel_linear_backward(tp, dx2.data(), nullptr, dw2.data(), db2.data(), dy.data(), x.data(), w.data(), N,
                                    C, OC, true, nullptr);
    EXPECT_TRUE(bit_equal(dx1, dx2) && bit_equal(dw1, dw2) && bit_equal(db1, db2)) << "column backward";
    Vec dw3 = dw2, dx3(N * C), scratch(OC * C);  // the row layer: the same GEMMs without a bias
    kernels::linear_forward(y1.data(), x.data(), w.data(), nullptr, N, C, OC);
    row_parallel_linear_forward(tp, y2.data(), nullptr, x.data(), w.data(), N, C, OC);
    EXPECT_TRUE(bit_equal(y1, y2));
    kernels::linear_backward(dx1.data(), dw1.data(), nullptr, dy.data(), x.data(), w.data(), N, C, OC);
    row_parallel_linear_backward(tp, dx2.data(), dw2.data(), nullptr, dy.data(), x.data(), w.data(), N, C, OC, true,
                                 nullptr);
    EXPECT_TRUE(bit_equal(dx1, dx2) && bit_equal(dw1, dw2)) << "row backward";
    row_parallel_linear_backward(tp, dx3.data(), dw3.data(), nullptr, dy.data(), x.data(), w.data(), N, C, OC, false,
                                 scratch.data());  // scratch + add: the same to rounding
    EXPECT_TRUE(bit_equal(dx3, dx2) && tp_close(dw3, dw2)) << "row backward, scratch accumulation";

    Vec e1(N * C), e2(N * C), g1(V * C, 0.25f), g2 = g1;
    kernels::embedding_forward(e1.data(), tok.data(), nullptr, wte.data(), nullptr, N, C);
    vocab_parallel_embedding_forward(tp, e2.data(), nullptr, tok.data(), wte.data(), N, C, 0, V);
    kernels::embedding_backward(g1.data(), nullptr, x.data(), tok.data(), nullptr, N, C);
    vocab_parallel_embedding_backward(tp, g2.data(), nullptr, x.data(), tok.data(), N, C, 0, V);
    EXPECT_TRUE(bit_equal(e1, e2) && bit_equal(g1, g2)) << "embedding";
  }
  // Megatron's softmax over the whole padded row, and masked to the 35 ids the targets reach (max 34).
  for (const int64_t vocab : {V, int64_t{35}})
    for (bool fused : {true, false}) {
      Vec l1(N), l2(N), s1(2 * N), s2(2 * N), sc1(N * V), sc2(N * V), d1(N * V), d2(N * V);
      kernels::cross_entropy_forward(l1.data(), s1.data(), logits.data(), tok.data(), N, V, vocab, fused, sc1.data());
      vocab_parallel_cross_entropy_forward(self, l2.data(), s2.data(), logits.data(), tok.data(), N, V, 0, vocab, fused,
                                           sc2.data());
      kernels::cross_entropy_backward(d1.data(), logits.data(), s1.data(), tok.data(), dl.data(), N, V, vocab, fused,
                                      sc1.data());
      vocab_parallel_cross_entropy_backward(d2.data(), logits.data(), s2.data(), tok.data(), dl.data(), N, V, 0, vocab,
                                            fused, sc2.data());
      EXPECT_TRUE(bit_equal(l1, l2) && bit_equal(s1, s2) && bit_equal(d1, d2))
          << "cross-entropy fused=" << fused << " vocab=" << vocab;
    }
}

// The masked embedding scatter (a rank's slice, vocab_start > 0) sums repeated tokens in token order whatever
// the thread count; large enough for the OpenMP path. No SP: the backward has no collective.
TEST(ParallelTensorParallel, BadCallsThrow) {
  const int64_t N = 6, C = 4, V = 8;
  Vec x(N * C, 1.0f), y(N * C), w(V * C, 1.0f), full(N * C), l(N), st(2 * N), sc(N * V);
  std::vector<int32_t> tok = token_ids(N, 1, 0);
  SelfComm self("tp");
  const TpConfig one{&self, false};
  EXPECT_THROW(column_parallel_linear_forward(one, y.data(), full.data(), x.data(), w.data(), nullptr, N, C, C), Error)
      << "x_full must be x without SP";
  EXPECT_THROW(row_parallel_linear_backward(one, x.data(), w.data(), nullptr, y.data(), x.data(), w.data(), N, C, C,
                                            false, nullptr),
               Error)
      << "scratch needed without gradient-accumulation fusion";
  tok[2] = -1;
  EXPECT_THROW(
      vocab_parallel_cross_entropy_forward(self, l.data(), st.data(), w.data(), tok.data(), N, V, 0, V, true, nullptr),
      Error);
  EXPECT_THROW(vocab_parallel_cross_entropy_backward(sc.data(), sc.data(), st.data(), tok.data(), l.data(), N, V, 0, V,
                                                     true, nullptr),
               Error);
  tok[2] = static_cast<int32_t>(V - 1);  // a padded id as a target: it has no probability
  EXPECT_THROW(vocab_parallel_cross_entropy_forward(self, l.data(), st.data(), w.data(), tok.data(), N, V, 0, V - 1,
                                                    true, nullptr),
               Error);
  EXPECT_THROW(vocab_parallel_cross_entropy_forward(self, l.data(), st.data(), w.data(), tok.data(), N, V, 0, V + 1,
                                                    true, nullptr),
               Error)
      << "vocab_size beyond the padded vocabulary";
  tok[2] = static_cast<int32_t>(V);
  EXPECT_THROW(vocab_parallel_embedding_forward(one, y.data(), nullptr, tok.data(), w.data(), N, C, 0, V), Error);
  // Sequence parallelism with N not divisible by the TP size: every rank throws before any collective.
  SimWorld world(4);
  EXPECT_THROW(world.run([&](int r) {
    auto comm = world.make_comm("tp", {0, 1, 2, 3}, r);
    Vec xs(C), xf(N * C), ys(N * C);
    column_parallel_linear_forward(TpConfig{comm.get(), true}, ys.data(), xf.data(), xs.data(), w.data(), nullptr, N, C,
                                   1);
  }),
               Error);
}

}  // namespace
}  // namespace mtrain::parallel
