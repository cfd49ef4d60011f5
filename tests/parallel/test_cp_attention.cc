// Context-parallel attention, the ring and Ulysses, over CP = 2 and 4
// simulated ranks against the whole causal attention computed in double: each rank holds
// sequence chunks r and 2P-1-r of q, k, v and the document ids; its output,
// log-sum-exp and the gradients of L = sum(w * out) must equal the
// reference's rows of those chunks. GQA (H = 8 query heads on G = 4 groups),
// chunks that are not multiples of the 64-row tiles, and documents that cross
// chunk (and rank) boundaries. With attention dropout, the reference drops
// score (b, h, tq, tk) by the counter definition of the single device's mask
// (common/rng.h: keep iff uniform01(seed, index) >= p at index ((b * heads +
// h) * pitch + tq) * pitch + tk over global heads and whole-sequence
// positions), here for the heads [8, 16) of 16 (a TP rank's) and a pitch
// (--seq_length) longer than the batch: a CP rank must draw exactly its
// slice of that mask, in the ring (blocks from other ranks at their chunks'
// positions) and in Ulysses (whole rows of a rank's heads).
//
// Bound (test_util/fp32_bounds.h): per element, fp32 rounding in any order of
// the same sums. A score q.k/sqrt(D) is off by gamma_{D+2} of its terms; a
// probability by twice that plus gamma_T (the row sum) and a few u, plus
// 4u per merge of block results (at most 2P per row), and with dropout 4u
// for the rounded keep scale and its product; each gradient element
// is a sum of at most T products of those with dout, v, q or k, whose
// absolute terms the reference adds up alongside the value.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "../tensor/kernel_test_util.h"
#include "common/rng.h"
#include "parallel/ring_attention.h"
#include "parallel/sim_comm.h"
#include "parallel/ulysses_attention.h"
#include "tensor/attention.h"
#include "test_util/fp32_bounds.h"

namespace mtrain::parallel {
namespace {

using kernels::testing::randn;
using kernels::testing::Vec;
using mtrain::testing::fp32_gamma;
using mtrain::testing::kFp32Unit;

struct Shape {
  int64_t B, H, G, T, D;
};

// Attention dropout of the tests: the local heads are heads [8, 8 + H) of 16,
// positions pitched past the batch's length.
struct Dropout {
  float p = 0.0f;
  uint64_t seed = 77;
  int64_t head_offset = 8, total_heads = 16, pitch = 0;
  // The multiplier of score (b, h, tq, tk) of the whole-sequence call: 0 or 1/(1-p).
  double z(int64_t b, int64_t h, int64_t tq, int64_t tk) const {
    if (p == 0.0f) return 1.0;
    const auto index = static_cast<uint64_t>(((b * total_heads + head_offset + h) * pitch + tq) * pitch + tk);
    return uniform01(seed, index) >= p ? 1.0 / (1.0 - p) : 0.0;
  }
};

// The reference in double: out, lse and the gradients, each with the sum of
// the absolute values of its terms (the scale its rounding error is bounded by).
struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
  std::vector<double> out_mag, dq_mag, dk_mag, dv_mag;
  double row_err = 0;  // largest relative error bound of a probability
};

Reference reference(const Vec& q, const Vec& k, const Vec& v, const Vec& w, const std::vector<int32_t>& doc,
                    const Shape& s, int merges, const Dropout& dr) {
  const auto [B, H, G, T, D] = s;
  const int64_t R = H / G;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  Reference r;
  r.out.assign(q.size(), 0), r.out_mag.assign(q.size(), 0), r.lse.assign(B * H * T, 0);
  r.dq.assign(q.size(), 0), r.dq_mag.assign(q.size(), 0);
  r.dk.assign(k.size(), 0), r.dk_mag.assign(k.size(), 0), r.dv.assign(v.size(), 0), r.dv_mag.assign(v.size(), 0);
  double score_err = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t pq = (b * H + h) * T, pk = (b * G + h / R) * T;
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> p(T, 0.0);
        double m = -INFINITY, sum = 0;
        auto vis = [&](int64_t j) { return j <= i && (doc.empty() || doc[b * T + j] == doc[b * T + i]); };
        for (int64_t j = 0; j < T; ++j) {
          if (!vis(j)) continue;
          double d = 0, a = 0;
          for (int64_t c = 0; c < D; ++c) {
            d += double(q[(pq + i) * D + c]) * k[(pk + j) * D + c];
            a += std::fabs(double(q[(pq + i) * D + c]) * k[(pk + j) * D + c]);
          }
          p[j] = d * scale;
          score_err = std::fmax(score_err, fp32_gamma(D + 2) * a * scale);
          m = std::fmax(m, p[j]);
        }
        for (int64_t j = 0; j < T; ++j) sum += vis(j) ? std::exp(p[j] - m) : 0.0;
        for (int64_t j = 0; j < T; ++j) p[j] = vis(j) ? std::exp(p[j] - m) / sum : 0.0;
        r.lse[pq + i] = m + std::log(sum);
        // out = (P o Z) v, then D_i = dout . out, dP = dout . v, dS = P (Z dP - D_i).
        std::vector<double> z(T);
        for (int64_t j = 0; j < T; ++j) z[j] = dr.z(b, h, i, j);
        double Di = 0, Di_mag = 0;
        for (int64_t c = 0; c < D; ++c) {
          for (int64_t j = 0; j < T; ++j) {
            r.out[(pq + i) * D + c] += p[j] * z[j] * v[(pk + j) * D + c];
            r.out_mag[(pq + i) * D + c] += p[j] * z[j] * std::fabs(v[(pk + j) * D + c]);
          }
        }
        for (int64_t c = 0; c < D; ++c) {
          Di += w[(pq + i) * D + c] * r.out[(pq + i) * D + c];
          Di_mag += std::fabs(w[(pq + i) * D + c] * r.out[(pq + i) * D + c]);
        }
        for (int64_t j = 0; j < T; ++j) {
          if (p[j] == 0) continue;
          double dP = 0, dP_mag = 0;
          for (int64_t c = 0; c < D; ++c) {
            dP += w[(pq + i) * D + c] * v[(pk + j) * D + c];
            dP_mag += std::fabs(w[(pq + i) * D + c] * v[(pk + j) * D + c]);
          }
          const double dS = p[j] * (z[j] * dP - Di),
                       dS_mag = p[j] * (std::fabs(z[j] * dP - Di) + z[j] * dP_mag + Di_mag);
          for (int64_t c = 0; c < D; ++c) {
            r.dv[(pk + j) * D + c] += p[j] * z[j] * w[(pq + i) * D + c];
            r.dv_mag[(pk + j) * D + c] += p[j] * z[j] * std::fabs(w[(pq + i) * D + c]);
            r.dq[(pq + i) * D + c] += scale * dS * k[(pk + j) * D + c];
            r.dq_mag[(pq + i) * D + c] += scale * dS_mag * std::fabs(k[(pk + j) * D + c]);
            r.dk[(pk + j) * D + c] += scale * dS * q[(pq + i) * D + c];
            r.dk_mag[(pk + j) * D + c] += scale * dS_mag * std::fabs(q[(pq + i) * D + c]);
          }
        }
      }
    }
  r.row_err =
      2 * score_err + 2 * fp32_gamma(T) + 8 * kFp32Unit + 4 * merges * kFp32Unit + (dr.p > 0 ? 4 * kFp32Unit : 0.0);
  return r;
}

// |got - ref| <= err * mag + u |ref| for every element.
::testing::AssertionResult within(const char* what, const Vec& got, const std::vector<double>& ref,
                                  const std::vector<double>& mag, double err) {
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = err * mag[i] + kFp32Unit * std::fabs(ref[i]);
    if (!(std::fabs(got[i] - ref[i]) <= bound))
      return ::testing::AssertionFailure()
             << what << "[" << i << "] = " << got[i] << ", reference " << ref[i] << ", bound " << bound;
  }
  return ::testing::AssertionSuccess();
}

// Rows of (outer, T, inner) held by CP rank `rank` of `P`: its two chunks, in order.
Vec local_rows(const Vec& x, int64_t outer, int64_t T, int64_t inner, int rank, int P) {
  const int64_t c = T / (2 * P);
  Vec out;
  for (int64_t o = 0; o < outer; ++o)
    for (int half = 0; half < 2; ++half) {
      const int64_t t0 = cp_chunk(rank, P, half) * c;
      out.insert(out.end(), x.begin() + (o * T + t0) * inner, x.begin() + (o * T + t0 + c) * inner);
    }
  return out;
}
// The inverse: writes a rank's local rows back into their global places.
void put_rows(Vec& x, const Vec& local, int64_t outer, int64_t T, int64_t inner, int rank, int P) {
  const int64_t c = T / (2 * P);
  int64_t at = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int half = 0; half < 2; ++half) {
      const int64_t t0 = cp_chunk(rank, P, half) * c;
      std::copy(local.begin() + at, local.begin() + at + c * inner, x.begin() + (o * T + t0) * inner);
      at += c * inner;
    }
}

struct Case {
  int P;
  bool docs;
  bool ulysses;
  float dropout = 0.0f;
  CpMask mask = CpMask::kCausal;  // the ring's: general computes whole masked blocks, the same result
};

// One rank's call of either algorithm, with buffers of its own.
struct RankAttention {
  Shape s;  // T = local rows
  int P;
  bool ulysses;
  CpMask mask;
  Vec travel0, travel1, bout, blse, scratch, heads, groups, pack;
  std::vector<int32_t> docs;
  RingBuffers ring;
  UlyssesBuffers uly;
  RankAttention(const Shape& sh, int p, bool u, CpMask m) : s(sh), P(p), ulysses(u), mask(m) {
    const auto [B, H, G, T, D] = s;
    if (ulysses) {
      heads.resize(4 * B * H * T * D), groups.resize(4 * B * G * T * D), pack.resize(2 * B * H * T * D);
      docs.resize(2 * B * P * T);
      scratch.resize(kernels::attention_flash_scratch_floats(B, H / P, G / P, P * T, D));
      const int64_t nh = B * H * T * D, ng = B * G * T * D;
      uly = UlyssesBuffers{
          heads.data(),       heads.data() + nh,      heads.data() + 2 * nh,  heads.data() + 3 * nh, groups.data(),
          groups.data() + ng, groups.data() + 2 * ng, groups.data() + 3 * ng, pack.data(),           pack.data() + nh,
          docs.data(),        scratch.data()};
    } else {
      travel0.resize(ring_travel_floats(B, G, T, D)), travel1.resize(travel0.size());
      bout.resize(B * H * T * D), blse.resize(B * H * T), docs.resize(2 * B * T);
      scratch.resize(kernels::attention_flash_block_scratch_floats(B, H, G, T / 2, D));
      ring = RingBuffers{{travel0.data(), travel1.data()},
                         {docs.data(), docs.data() + B * T},
                         bout.data(),
                         blse.data(),
                         scratch.data()};
    }
  }
  void forward(Comm& cp, Vec& o, Vec& l, const Vec& q, const Vec& k, const Vec& v, const int32_t* d,
               const CpDropout& dr) {
    const auto [B, H, G, T, D] = s;
    if (ulysses)
      ulysses_attention_forward(cp, o.data(), l.data(), q.data(), k.data(), v.data(), d, B, H, G, T, D, dr, uly);
    else
      ring_attention_forward(cp, o.data(), l.data(), q.data(), k.data(), v.data(), d, B, H, G, T, D, dr, ring, mask);
  }
  void backward(Comm& cp, Vec& gq, Vec& gk, Vec& gv, const Vec& w, const Vec& q, const Vec& k, const Vec& v,
                const Vec& o, const Vec& l, const int32_t* d, const CpDropout& dr) {
    const auto [B, H, G, T, D] = s;
    if (ulysses)
      ulysses_attention_backward(cp, gq.data(), gk.data(), gv.data(), w.data(), q.data(), k.data(), v.data(), o.data(),
                                 l.data(), d, B, H, G, T, D, dr, uly);
    else
      ring_attention_backward(cp, gq.data(), gk.data(), gv.data(), w.data(), q.data(), k.data(), v.data(), o.data(),
                              l.data(), d, B, H, G, T, D, dr, ring, mask);
  }
};

class ContextParallelAttention : public ::testing::TestWithParam<Case> {};

TEST_P(ContextParallelAttention, EqualsWholeAttention) {
  const auto [P, docs, ulysses, p, mask] = GetParam();
  const Shape s{2, 8, 4, 2 * P * 9, 8};  // chunks of 9 rows
  const auto [B, H, G, T, D] = s;
  std::vector<int32_t> doc;
  if (docs) {  // batch 0: documents of 13 rows (crossing chunks); batch 1: one short, then one to the end
    for (int64_t t = 0; t < T; ++t) doc.push_back(static_cast<int32_t>(t / 13));
    for (int64_t t = 0; t < T; ++t) doc.push_back(t < 4 ? 0 : 1);
  }
  const Vec q = randn(B * H * T * D, 60), k = randn(B * G * T * D, 61), v = randn(B * G * T * D, 62),
            w = randn(B * H * T * D, 63);
  Dropout dropout;
  dropout.p = p, dropout.pitch = T + 6;  // --seq_length past the batch's rows
  const Reference ref = reference(q, k, v, w, doc, s, 2 * P, dropout);
  const CpDropout cp_dropout{p, dropout.seed, dropout.head_offset, dropout.total_heads, dropout.pitch};
  Vec out(q.size()), lse(B * H * T), dq(q.size()), dk(k.size()), dv(v.size());
  SimWorld world(P);
  std::vector<Vec> results(P);
  world.run([&](int rank) {
    RankGroup members;
    for (int i = 0; i < P; ++i) members.push_back(i);
    auto cp = world.make_comm("cp", members, rank);
    const int64_t Tl = T / P;
    const Vec lq = local_rows(q, B * H, T, D, rank, P), lk = local_rows(k, B * G, T, D, rank, P),
              lv = local_rows(v, B * G, T, D, rank, P), lw = local_rows(w, B * H, T, D, rank, P);
    std::vector<int32_t> ldoc;
    if (docs)
      for (int64_t b = 0; b < B; ++b)
        for (int half = 0; half < 2; ++half)
          for (int64_t t = 0; t < T / (2 * P); ++t)
            ldoc.push_back(doc[b * T + cp_chunk(rank, P, half) * (T / (2 * P)) + t]);
    RankAttention att(Shape{B, H, G, Tl, D}, P, ulysses, mask);
    Vec o(lq.size()), l(B * H * Tl), gq(lq.size()), gk(lk.size()), gv(lv.size());
    const int32_t* d = docs ? ldoc.data() : nullptr;
    att.forward(*cp, o, l, lq, lk, lv, d, cp_dropout);
    att.backward(*cp, gq, gk, gv, lw, lq, lk, lv, o, l, d, cp_dropout);
    // Ranks write disjoint rows of the global results.
    put_rows(out, o, B * H, T, D, rank, P);
    if (!ulysses) put_rows(lse, l, B * H, T, 1, rank, P);  // Ulysses keeps a head-split lse of its own
    put_rows(dq, gq, B * H, T, D, rank, P);
    put_rows(dk, gk, B * G, T, D, rank, P);
    put_rows(dv, gv, B * G, T, D, rank, P);
  });
  const double e = ref.row_err, eg = e + fp32_gamma(T) + fp32_gamma(D);
  EXPECT_TRUE(within("out", out, ref.out, ref.out_mag, e));
  std::vector<double> lse_mag(ref.lse.size(), 1.0);  // absolute error of max + log(sum)
  if (!ulysses) {
    EXPECT_TRUE(within("lse", lse, ref.lse, lse_mag, e));
  }
  EXPECT_TRUE(within("dq", dq, ref.dq, ref.dq_mag, eg));
  EXPECT_TRUE(within("dk", dk, ref.dk, ref.dk_mag, eg));
  EXPECT_TRUE(within("dv", dv, ref.dv, ref.dv_mag, eg));
}

INSTANTIATE_TEST_SUITE_P(Cp, ContextParallelAttention,
                         ::testing::Values(Case{2, false, false}, Case{2, true, false}, Case{4, false, false},
                                           Case{4, true, false}, Case{2, false, true}, Case{2, true, true},
                                           Case{4, false, true}, Case{4, true, true}, Case{2, true, false, 0.3f},
                                           Case{4, false, false, 0.3f}, Case{2, true, true, 0.3f},
                                           Case{4, false, true, 0.3f}, Case{2, true, false, 0.0f, CpMask::kGeneral},
                                           Case{4, false, false, 0.3f, CpMask::kGeneral}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.ulysses ? "ulysses" : "ring") + "_cp" +
                                  std::to_string(i.param.P) + (i.param.docs ? "_documents" : "") +
                                  (i.param.dropout > 0 ? "_dropout" : "") +
                                  (i.param.mask == CpMask::kGeneral ? "_general_mask" : "");
                         });

}  // namespace
}  // namespace mtrain::parallel
