// Vocab-parallel embedding and cross-entropy (parallel/tensor_parallel.h)
// against the unsharded kernels, over tp = 2 and 4 simulated ranks, sequence
// parallelism off and on, fused and unfused cross-entropy: outputs and every
// gradient of every rank vs the matching slice of the reference, within fp32
// rounding (tensor_parallel_test_util.h; the embedding exactly). Includes the
// chain tokens -> embedding -> column-parallel LM head -> loss and back. The
// cross-entropy runs unmasked (Megatron: all 40 padded ids in the softmax) and
// masked to 27 real ids, so that at tp = 4 rank 2 holds 7 real columns and
// rank 3 none; padded columns and rows must get exactly zero gradient.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "parallel/tensor_parallel.h"
#include "tensor/cross_entropy.h"
#include "tensor/embedding.h"
#include "tensor/linear.h"
#include "tensor_parallel_test_util.h"

namespace mtrain::parallel {
namespace {

using kernels::testing::all_close;
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

// ---- Vocab-parallel embedding and cross-entropy ------------------------------------------------

struct VocabCase {
  int tp;
  bool sp, fused_ce;
  int64_t vocab;  // ids in the softmax: kVocab (unmasked) or fewer (the rest masked as padding)
};
void PrintTo(const VocabCase& c, std::ostream* os) {
  *os << "tp=" << c.tp << " sp=" << c.sp << " fused_ce=" << c.fused_ce << " vocab=" << c.vocab;
}

// Ids below the case's vocabulary (the data never holds a padded id).
std::vector<int32_t> real_ids(const VocabCase& c, std::vector<int32_t> ids) {
  for (int32_t& t : ids) t = static_cast<int32_t>(t % c.vocab);
  return ids;
}

// Every element of the (nrows, ncols) slice in columns [c0, ncols) is exactly 0 (empty range: true).
bool zero_columns(const Vec& x, int64_t nrows, int64_t ncols, int64_t c0) {
  for (int64_t i = 0; i < nrows; ++i)
    for (int64_t j = std::max<int64_t>(c0, 0); j < ncols; ++j)
      if (x[i * ncols + j] != 0.0f) return false;
  return true;
}

class ParallelTensorParallelVocab : public ::testing::TestWithParam<VocabCase> {};

TEST_P(ParallelTensorParallelVocab, EmbeddingMatchesReference) {
  const VocabCase c = GetParam();
  const int64_t N = 24, C = 80, Vl = kVocab / c.tp, Nl = N / c.tp;
  const std::vector<int32_t> tokens = token_ids(N, 13, 5);
  const Vec wte = randn(kVocab * C, 31), dout = randn(N * C, 32), dw0 = randn(kVocab * C, 33);
  Vec out(N * C), dw = dw0;
  kernels::embedding_forward(out.data(), tokens.data(), nullptr, wte.data(), nullptr, N, C);
  kernels::embedding_backward(dw.data(), nullptr, dout.data(), tokens.data(), nullptr, N, C);
  std::vector<Vec> o(c.tp), dwl(c.tp);
  std::vector<std::vector<CommOp>> ops;
  run_tp(c.tp, ops, [&](int r, Comm& comm) {
    const TpConfig tp{&comm, c.sp};
    const Vec wl = rows(wte, r * Vl, Vl, C), din = c.sp ? rows(dout, r * Nl, Nl, C) : dout;
    Vec full(N * C);
    o[r].assign(din.size(), NAN);
    dwl[r] = rows(dw0, r * Vl, Vl, C);
    vocab_parallel_embedding_forward(tp, o[r].data(), full.data(), tokens.data(), wl.data(), N, C, r * Vl, Vl);
    vocab_parallel_embedding_backward(tp, dwl[r].data(), full.data(), din.data(), tokens.data(), N, C, r * Vl, Vl);
  });
  for (int r = 0; r < c.tp; ++r) {
    EXPECT_TRUE(all_close(o[r], c.sp ? rows(out, r * Nl, Nl, C) : out, 0.0, 0.0)) << "out rank " << r;
    EXPECT_TRUE(all_close(dwl[r], rows(dw, r * Vl, Vl, C), 0.0, 0.0)) << "dw rank " << r;
  }
}

TEST_P(ParallelTensorParallelVocab, CrossEntropyMatchesReference) {
  const VocabCase c = GetParam();
  const int64_t N = 24, Vl = kVocab / c.tp;
  const std::vector<int32_t> targets = real_ids(c, token_ids(N, 7, 1));
  const Vec logits = randn(N * kVocab, 41, 3.0f), dlosses = randn(N, 42);
  Vec losses(N), stats(2 * N), scratch(N * kVocab), dlogits(N * kVocab);
  kernels::cross_entropy_forward(losses.data(), stats.data(), logits.data(), targets.data(), N, kVocab, c.vocab,
                                 c.fused_ce, scratch.data());
  kernels::cross_entropy_backward(dlogits.data(), logits.data(), stats.data(), targets.data(), dlosses.data(), N,
                                  kVocab, c.vocab, c.fused_ce, scratch.data());
  std::vector<Vec> l(c.tp), st(c.tp), dl(c.tp);
  std::vector<std::vector<CommOp>> ops;
  run_tp(c.tp, ops, [&](int r, Comm& comm) {
    Vec xl = cols(logits, N, kVocab, r * Vl, Vl), sc(c.fused_ce ? 0 : N * Vl, NAN);
    l[r].assign(N, NAN);
    st[r].assign(2 * N, NAN);
    vocab_parallel_cross_entropy_forward(comm, l[r].data(), st[r].data(), xl.data(), targets.data(), N, Vl, r * Vl,
                                         c.vocab, c.fused_ce, ptr(sc));
    Vec out(N * Vl, NAN);
    float* g = c.fused_ce ? xl.data() : out.data();  // the fused backward may overwrite the logits
    vocab_parallel_cross_entropy_backward(g, xl.data(), st[r].data(), targets.data(), dlosses.data(), N, Vl, r * Vl,
                                          c.vocab, c.fused_ce, ptr(sc));
    dl[r].assign(g, g + N * Vl);
  });
  for (int r = 0; r < c.tp; ++r) {
    EXPECT_TRUE(tp_close(l[r], losses)) << "losses rank " << r;
    EXPECT_TRUE(bit_equal(l[r], l[0])) << "losses differ between ranks 0 and " << r;
    EXPECT_TRUE(tp_close(st[r], stats)) << "stats (max, lse) rank " << r;
    EXPECT_TRUE(tp_close(dl[r], cols(dlogits, N, kVocab, r * Vl, Vl))) << "dlogits rank " << r;
    EXPECT_TRUE(zero_columns(dl[r], N, Vl, c.vocab - r * Vl)) << "padded dlogits of rank " << r;
    EXPECT_EQ(ops[r].size(), c.fused_ce ? 2u : 3u) << "all-reduces of rank " << r;
  }
}

// tokens -> vocab-parallel embedding -> column-parallel LM head (vocab rows) -> vocab-parallel CE, and back.
TEST_P(ParallelTensorParallelVocab, EmbeddingHeadLossChain) {
  const VocabCase c = GetParam();
  const int64_t N = 16, C = 32, Vl = kVocab / c.tp, Nl = N / c.tp;
  const std::vector<int32_t> tokens = real_ids(c, token_ids(N, 11, 3)), targets = real_ids(c, token_ids(N, 17, 2));
  const Vec wte = randn(kVocab * C, 51), wout = randn(kVocab * C, 52, 0.3f), dlosses = randn(N, 53);
  Vec h(N * C), logits(N * kVocab), losses(N), stats(2 * N), scratch(N * kVocab), dh(N * C);
  Vec dwte(kVocab * C, 0.0f), dwout(kVocab * C, 0.0f);
  kernels::embedding_forward(h.data(), tokens.data(), nullptr, wte.data(), nullptr, N, C);
  kernels::linear_forward(logits.data(), h.data(), wout.data(), nullptr, N, C, kVocab);
  kernels::cross_entropy_forward(losses.data(), stats.data(), logits.data(), targets.data(), N, kVocab, c.vocab,
                                 c.fused_ce, scratch.data());
  kernels::cross_entropy_backward(logits.data(), logits.data(), stats.data(), targets.data(), dlosses.data(), N, kVocab,
                                  c.vocab, c.fused_ce, scratch.data());
  kernels::linear_backward(dh.data(), dwout.data(), nullptr, logits.data(), h.data(), wout.data(), N, C, kVocab);
  kernels::embedding_backward(dwte.data(), nullptr, dh.data(), tokens.data(), nullptr, N, C);

  std::vector<Vec> l(c.tp), dwtel(c.tp), dwoutl(c.tp);
  std::vector<std::vector<CommOp>> ops;
  run_tp(c.tp, ops, [&](int r, Comm& comm) {
    const TpConfig tp{&comm, c.sp};
    const Vec wtel = rows(wte, r * Vl, Vl, C), woutl = rows(wout, r * Vl, Vl, C);
    const int64_t ntok = c.sp ? Nl : N;
    Vec hl(ntok * C), full(N * C), h_full(N * C), lg(N * Vl), st(2 * N), sc(N * Vl), dhl(ntok * C);
    l[r].resize(N);
    dwtel[r].assign(Vl * C, 0.0f);
    dwoutl[r].assign(Vl * C, 0.0f);
    float* x_full = c.sp ? h_full.data() : hl.data();
    vocab_parallel_embedding_forward(tp, hl.data(), full.data(), tokens.data(), wtel.data(), N, C, r * Vl, Vl);
    column_parallel_linear_forward(tp, lg.data(), x_full, hl.data(), woutl.data(), nullptr, N, C, Vl);
    vocab_parallel_cross_entropy_forward(comm, l[r].data(), st.data(), lg.data(), targets.data(), N, Vl, r * Vl,
                                         c.vocab, c.fused_ce, sc.data());
    vocab_parallel_cross_entropy_backward(lg.data(), lg.data(), st.data(), targets.data(), dlosses.data(), N, Vl,
                                          r * Vl, c.vocab, c.fused_ce, sc.data());
    column_parallel_linear_backward(tp, dhl.data(), full.data(), dwoutl[r].data(), nullptr, lg.data(), x_full,
                                    woutl.data(), N, C, Vl, true, nullptr);
    vocab_parallel_embedding_backward(tp, dwtel[r].data(), full.data(), dhl.data(), tokens.data(), N, C, r * Vl, Vl);
  });
  for (int r = 0; r < c.tp; ++r) {
    EXPECT_TRUE(tp_close(l[r], losses)) << "losses rank " << r;
    EXPECT_TRUE(tp_close(dwoutl[r], rows(dwout, r * Vl, Vl, C))) << "d output layer rank " << r;
    EXPECT_TRUE(tp_close(dwtel[r], rows(dwte, r * Vl, Vl, C))) << "d word embeddings rank " << r;
    // Padded rows: no gradient from the loss (output layer) nor from lookups (embedding).
    const int64_t first_pad = std::max<int64_t>(0, c.vocab - r * Vl) * C;
    EXPECT_TRUE(zero_columns(dwoutl[r], 1, Vl * C, first_pad)) << "padded output-layer rows of rank " << r;
    EXPECT_TRUE(zero_columns(dwtel[r], 1, Vl * C, first_pad)) << "padded embedding rows of rank " << r;
  }
}

std::vector<VocabCase> vocab_cases() {
  std::vector<VocabCase> cases;
  for (int tp : {2, 4})
    for (bool sp : {false, true})
      for (bool fused_ce : {true, false})
        for (int64_t vocab : {kVocab, int64_t{27}}) cases.push_back({tp, sp, fused_ce, vocab});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, ParallelTensorParallelVocab, ::testing::ValuesIn(vocab_cases()),
                         [](const ::testing::TestParamInfo<VocabCase>& info) {
                           const VocabCase& c = info.param;
                           return "tp" + std::to_string(c.tp) + (c.sp ? "_sp" : "_nosp") +
                                  (c.fused_ce ? "_fusedce" : "_unfusedce") +
                                  (c.vocab == kVocab ? "_unmasked" : "_masked" + std::to_string(c.vocab));
                         });

TEST(ParallelTensorParallel, EmbeddingBackwardIsThreadCountInvariant) {
  const int64_t N = 256, C = 96, Vl = kVocab / 2;
  const std::vector<int32_t> tok = token_ids(N, 7, 3);
  const Vec dout = randn(N * C, 71);
  std::vector<Vec> one(2), two(2);
  std::vector<std::vector<CommOp>> ops;
  run_tp(2, ops, [&](int r, Comm& comm) {
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      Vec& dw = (threads == 1 ? one : two)[r];
      dw.assign(Vl * C, 0.0f);
      vocab_parallel_embedding_backward(TpConfig{&comm, false}, dw.data(), nullptr, dout.data(), tok.data(), N, C,
                                        r * Vl, Vl);
    }
  });
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(bit_equal(one[r], two[r])) << "rank " << r;
  EXPECT_TRUE(ops[0].empty() && ops[1].empty());
}

}  // namespace
}  // namespace mtrain::parallel
