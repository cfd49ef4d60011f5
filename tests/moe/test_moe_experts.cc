// The routed experts' kernels (lib/moe/grouped_gemm.h, permute.h) against
// fp64 references written here: the grouped GEMM and the per-expert loop
// each equal the reference within Higham's bound and each other in the max
// norm; the permutation is Megatron's order (worked by hand below); padding
// to capacity changes nothing; unpermute and its backward equal their
// definitions; fused and unfused permute paths agree.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "moe/grouped_gemm.h"
#include "moe/permute.h"
#include "test_util/fp32_bounds.h"

namespace mtrain::moe {
namespace {

using testing::close_in_max_norm;
using testing::fp32_gamma;
using testing::within_bounds;

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// Uneven experts, one of them empty, several rows above one 64-row tile.
struct Experts {
  int64_t C = 24, OC = 72;  // OC above one 64-row tile of the weight gradient
  std::vector<int64_t> rows = {70, 0, 5, 131};
  int64_t M() const { return rows[0] + rows[1] + rows[2] + rows[3]; }
  std::vector<std::vector<float>> w;
  Experts() {
    for (size_t g = 0; g < rows.size(); ++g) w.push_back(randn(OC * C, 100 + g, 0.3f));
  }
  std::vector<const float*> ptrs() const {
    std::vector<const float*> p;
    for (const auto& x : w) p.push_back(x.data());
    return p;
  }
};

// out = inp · W_g^T per expert in fp64, and the bound gamma_C * sum |terms|.
void reference_forward(const Experts& ex, const std::vector<float>& inp, std::vector<float>& ref,
                       std::vector<double>& bound) {
  ref.assign(ex.M() * ex.OC, 0.f);
  bound.assign(ex.M() * ex.OC, 0.0);
  int64_t r0 = 0;
  for (size_t g = 0; g < ex.rows.size(); ++g) {
    for (int64_t r = r0; r < r0 + ex.rows[g]; ++r)
      for (int64_t o = 0; o < ex.OC; ++o) {
        double s = 0, a = 0;
        for (int64_t c = 0; c < ex.C; ++c) {
          const double t = static_cast<double>(inp[r * ex.C + c]) * ex.w[g][o * ex.C + c];
          s += t;
          a += std::fabs(t);
        }
        ref[r * ex.OC + o] = static_cast<float>(s);
        bound[r * ex.OC + o] = fp32_gamma(ex.C) * a + std::fabs(s) * testing::kFp32Unit;
      }
    r0 += ex.rows[g];
  }
}

TEST(MoeGroupedGemm, ForwardMatchesFp64ReferenceGroupedAndLooped) {
  const Experts ex;
  const std::vector<float> inp = randn(ex.M() * ex.C, 7);
  std::vector<float> ref;
  std::vector<double> bound;
  reference_forward(ex, inp, ref, bound);
  for (bool grouped : {true, false}) {
    std::vector<float> out(ex.M() * ex.OC, NAN);
    grouped_linear_forward(out.data(), inp.data(), ex.ptrs().data(), ex.rows.data(), 4, ex.C, ex.OC, grouped);
    EXPECT_TRUE(within_bounds(out, ref, bound)) << (grouped ? "grouped" : "looped");
  }
}

TEST(MoeGroupedGemm, BackwardMatchesFp64ReferenceGroupedAndLooped) {
  const Experts ex;
  const int64_t M = ex.M(), C = ex.C, OC = ex.OC;
  const std::vector<float> inp = randn(M * C, 8), dout = randn(M * OC, 9);
  // Reference: dinp = dout · W_g; dW_g = dW0 + dout_g^T inp_g (accumulated onto dW0).
  std::vector<float> dinp_ref(M * C);
  std::vector<double> dinp_bound(M * C);
  std::vector<std::vector<float>> dw_ref(4, randn(OC * C, 11, 0.1f));
  std::vector<std::vector<double>> dw_bound(4, std::vector<double>(OC * C));
  int64_t r0 = 0;
  for (int g = 0; g < 4; ++g) {
    for (int64_t r = r0; r < r0 + ex.rows[g]; ++r)
      for (int64_t c = 0; c < C; ++c) {
        double s = 0, a = 0;
        for (int64_t o = 0; o < OC; ++o) {
          const double t = static_cast<double>(dout[r * OC + o]) * ex.w[g][o * C + c];
          s += t, a += std::fabs(t);
        }
        dinp_ref[r * C + c] = static_cast<float>(s);
        dinp_bound[r * C + c] = fp32_gamma(OC) * a + std::fabs(s) * testing::kFp32Unit;
      }
    for (int64_t o = 0; o < OC; ++o)
      for (int64_t c = 0; c < C; ++c) {
        double s = dw_ref[g][o * C + c], a = std::fabs(s);
        for (int64_t r = r0; r < r0 + ex.rows[g]; ++r) {
          const double t = static_cast<double>(dout[r * OC + o]) * inp[r * C + c];
          s += t, a += std::fabs(t);
        }
        dw_ref[g][o * C + c] = static_cast<float>(s);
        dw_bound[g][o * C + c] = fp32_gamma(ex.rows[g] + 1) * a + std::fabs(s) * testing::kFp32Unit;
      }
    r0 += ex.rows[g];
  }
  for (bool grouped : {true, false}) {
    std::vector<float> dinp(M * C, NAN);
    std::vector<std::vector<float>> dw(4, randn(OC * C, 11, 0.1f));
    std::vector<float*> dwp;
    for (auto& x : dw) dwp.push_back(x.data());
    grouped_linear_backward(dinp.data(), dwp.data(), dout.data(), inp.data(), ex.ptrs().data(), ex.rows.data(), 4, C,
                            OC, grouped);
    EXPECT_TRUE(within_bounds(dinp, dinp_ref, dinp_bound)) << (grouped ? "grouped" : "looped");
    for (int g = 0; g < 4; ++g) EXPECT_TRUE(within_bounds(dw[g], dw_ref[g], dw_bound[g])) << "expert " << g;
  }
}

TEST(MoeGroupedGemm, GroupedEqualsLoopedInMaxNorm) {
  const Experts ex;
  const std::vector<float> inp = randn(ex.M() * ex.C, 12);
  std::vector<float> a(ex.M() * ex.OC), b(ex.M() * ex.OC);
  grouped_linear_forward(a.data(), inp.data(), ex.ptrs().data(), ex.rows.data(), 4, ex.C, ex.OC, true);
  grouped_linear_forward(b.data(), inp.data(), ex.ptrs().data(), ex.rows.data(), 4, ex.C, ex.OC, false);
  // Two fp32 evaluations of C-term dot products: each within gamma_C of the exact value.
  EXPECT_TRUE(close_in_max_norm(a.data(), b.data(), a.size(), 2 * fp32_gamma(ex.C) * 3.0));
}

// Megatron's permute order, by hand. N = 4 tokens, k = 2, E = 3:
//   token 0 -> experts (2, 0), token 1 -> (1, 2), token 2 -> (0, 1), token 3 -> (2, 1).
// The routing map transposed (expert-major), tokens ascending within an expert:
//   expert 0: tokens 0, 2   expert 1: tokens 1, 2, 3   expert 2: tokens 0, 1, 3
// so row_token = [0 2 | 1 2 3 | 0 1 3] and the slots (t*k + j) = [1 4 | 2 5 7 | 0 3 6].
// Dropping slot 5 (token 2's expert 1) removes that row: [0 2 | 1 3 | 0 1 3].
TEST(MoePermute, MegatronOrderByHand) {
  const std::vector<int32_t> experts = {2, 0, 1, 2, 0, 1, 2, 1};
  std::vector<int32_t> row_token(8), row_slot(8), slot_row(8);
  std::vector<int64_t> rows(3);
  int64_t M = build_permutation(row_token.data(), row_slot.data(), slot_row.data(), rows.data(), experts.data(),
                                nullptr, 4, 2, 3, 0);
  EXPECT_EQ(M, 8);
  EXPECT_EQ(row_token, (std::vector<int32_t>{0, 2, 1, 2, 3, 0, 1, 3}));
  EXPECT_EQ(row_slot, (std::vector<int32_t>{1, 4, 2, 5, 7, 0, 3, 6}));
  EXPECT_EQ(rows, (std::vector<int64_t>{2, 3, 3}));
  EXPECT_EQ(slot_row, (std::vector<int32_t>{5, 0, 2, 6, 1, 3, 7, 4}));
  const std::vector<uint8_t> kept = {1, 1, 1, 1, 1, 0, 1, 1};
  M = build_permutation(row_token.data(), row_slot.data(), slot_row.data(), rows.data(), experts.data(), kept.data(), 4,
                        2, 3, 0);
  EXPECT_EQ(M, 7);
  row_token.resize(7);
  EXPECT_EQ(row_token, (std::vector<int32_t>{0, 2, 1, 3, 0, 1, 3}));
  EXPECT_EQ(slot_row[5], -1);
  // Padded to capacity 3: expert 0 gets one padding row, expert 1 one (after the drop).
  row_token.assign(9, 99);
  M = build_permutation(row_token.data(), row_slot.data(), slot_row.data(), rows.data(), experts.data(), kept.data(), 4,
                        2, 3, 3);
  EXPECT_EQ(M, 9);
  EXPECT_EQ(row_token, (std::vector<int32_t>{0, 2, -1, 1, 3, -1, 0, 1, 3}));
  EXPECT_EQ(rows, (std::vector<int64_t>{3, 3, 3}));
}

// Routing of N tokens to k of E experts, no repeats per token, some slots dropped.
struct Routing {
  int64_t N = 9, k = 2, E = 4, C = 6;
  std::vector<int32_t> experts;
  std::vector<uint8_t> kept;
  std::vector<float> probs;
  Routing() {
    std::mt19937 g(3);
    for (int64_t t = 0; t < N; ++t) {
      const int32_t a = static_cast<int32_t>(g() % E), b = static_cast<int32_t>((a + 1 + g() % (E - 1)) % E);
      experts.insert(experts.end(), {a, b});
      kept.insert(kept.end(), {1, static_cast<uint8_t>(t % 4 != 1)});
    }
    probs = randn(N * k, 4);
    for (float& p : probs) p = std::fabs(p);
  }
};

TEST(MoePermute, UnpermuteAndBackwardEqualTheirDefinitionsPaddingChangesNothing) {
  const Routing rt;
  const int64_t N = rt.N, k = rt.k, C = rt.C, E = rt.E;
  const std::vector<float> x = randn(N * C, 5), dout = randn(N * C, 6);
  std::vector<float> results[2];
  for (int64_t pad : {int64_t{0}, int64_t{N}}) {
    const int64_t Mmax = pad ? E * pad : N * k;
    std::vector<int32_t> row_token(Mmax), row_slot(Mmax), slot_row(N * k);
    std::vector<int64_t> rows(E);
    const int64_t M = build_permutation(row_token.data(), row_slot.data(), slot_row.data(), rows.data(),
                                        rt.experts.data(), rt.kept.data(), N, k, E, pad);
    std::vector<float> xp(M * C), pp(M), y(M * C), out(N * C), scratch(M * C);
    permute_forward(xp.data(), pp.data(), x.data(), rt.probs.data(), row_token.data(), row_slot.data(), M, C, true);
    // An "expert" that squares its input, so rows differ from tokens.
    for (int64_t i = 0; i < M * C; ++i) y[i] = xp[i] * xp[i] + 0.5f;
    unpermute_forward(out.data(), y.data(), pp.data(), slot_row.data(), N, k, M, C, true, nullptr);
    std::vector<float> dy(M * C), dprobs(N * k), dx(N * C, 0.f);
    unpermute_backward(dy.data(), dprobs.data(), dout.data(), y.data(), pp.data(), row_token.data(), slot_row.data(), N,
                       k, M, C);
    permute_backward(dx.data(), dy.data(), slot_row.data(), N, k, C);
    // Definitions in fp64: out_t = sum_j kept p_tj (x_t^2 + 0.5); dprob_tj = <dout_t, x_t^2 + 0.5>;
    // dx_t = sum_j kept p_tj dout_t (what permute_backward sums of dy).
    for (int64_t t = 0; t < N; ++t)
      for (int64_t c = 0; c < C; ++c) {
        const double v = static_cast<double>(x[t * C + c]) * x[t * C + c] + 0.5;
        double o = 0, d = 0, a = 0;
        for (int64_t j = 0; j < k; ++j)
          if (rt.kept[t * k + j])
            o += rt.probs[t * k + j] * v, d += rt.probs[t * k + j] * dout[t * C + c],
                a += std::fabs(rt.probs[t * k + j] * v);
        EXPECT_NEAR(out[t * C + c], o, 4 * testing::kFp32Unit * (a + 1)) << t << "," << c;
        EXPECT_NEAR(dx[t * C + c], d, 4 * testing::kFp32Unit * (std::fabs(d) + 1));
      }
    for (int64_t s = 0; s < N * k; ++s) {
      double dp = 0, a = 0;
      for (int64_t c = 0; c < C; ++c) {
        const double v = static_cast<double>(x[(s / k) * C + c]) * x[(s / k) * C + c] + 0.5;
        dp += dout[(s / k) * C + c] * v, a += std::fabs(dout[(s / k) * C + c] * v);
      }
      EXPECT_NEAR(dprobs[s], rt.kept[s] ? dp : 0.0, fp32_gamma(C + 2) * a) << "slot " << s;
    }
    results[pad ? 1 : 0] = out;
  }
  EXPECT_EQ(results[0], results[1]);  // padding rows add exact zeros
}

TEST(MoePermute, FusedEqualsUnfused) {
  const Routing rt;
  const int64_t N = rt.N, k = rt.k, C = rt.C, E = rt.E;
  const std::vector<float> x = randn(N * C, 5);
  std::vector<int32_t> row_token(N * k), row_slot(N * k), slot_row(N * k);
  std::vector<int64_t> rows(E);
  const int64_t M = build_permutation(row_token.data(), row_slot.data(), slot_row.data(), rows.data(),
                                      rt.experts.data(), rt.kept.data(), N, k, E, 0);
  std::vector<float> xp[2], pp[2], out[2];
  for (int f = 0; f < 2; ++f) {
    xp[f].resize(M * C), pp[f].resize(M), out[f].resize(N * C);
    std::vector<float> scratch(M * C);
    permute_forward(xp[f].data(), pp[f].data(), x.data(), rt.probs.data(), row_token.data(), row_slot.data(), M, C,
                    f == 1);
    unpermute_forward(out[f].data(), xp[f].data(), pp[f].data(), slot_row.data(), N, k, M, C, f == 1, scratch.data());
  }
  EXPECT_EQ(xp[0], xp[1]);
  EXPECT_EQ(pp[0], pp[1]);
  // Each output is a sum of at most k products: with or without an FMA, within gamma_(k+1) of each other.
  EXPECT_TRUE(close_in_max_norm(out[1].data(), out[0].data(), out[0].size(), 2 * fp32_gamma(k + 1)));
}

}  // namespace
}  // namespace mtrain::moe
