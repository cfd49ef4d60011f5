// Finite-difference gradient checks for every kernel backward: L = sum(out * w)
// with random w, analytic gradients from the backward kernel (dout = w)
// against central differences of the fp32 forward, for every input.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "tensor/activation.h"
#include "tensor/attention.h"
#include "tensor/cross_entropy.h"
#include "tensor/embedding.h"
#include "tensor/linear.h"
#include "tensor/norm.h"
#include "tensor/rope.h"

namespace mtrain::kernels {
namespace {

using testing::dot;
using testing::fd_check;
using testing::randn;
using testing::Vec;

TEST(LinearGrad, AllInputs) {
  const int64_t N = 5, C = 6, OC = 7;
  Vec inp = randn(N * C, 1), weight = randn(OC * C, 2), bias = randn(OC, 3), w = randn(N * OC, 4);
  Vec out(N * OC), dinp(N * C), dweight(OC * C, 0.0f), dbias(OC, 0.0f);
  auto loss = [&] {
    linear_forward(out.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
    return dot(out, w);
  };
  linear_backward(dinp.data(), dweight.data(), dbias.data(), w.data(), inp.data(), weight.data(), N, C, OC);
  EXPECT_TRUE(fd_check("dinp", inp, dinp, loss));
  EXPECT_TRUE(fd_check("dweight", weight, dweight, loss));
  EXPECT_TRUE(fd_check("dbias", bias, dbias, loss));
}

TEST(LayerNormGrad, AllInputs) {
  const int64_t N = 4, C = 9;
  Vec inp = randn(N * C, 5), weight = randn(C, 6), bias = randn(C, 7), w = randn(N * C, 8);
  Vec out(N * C), mean(N), rstd(N), dinp(N * C, 0.0f), dweight(C, 0.0f), dbias(C, 0.0f);
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C, 1e-5f);
    return dot(out, w);
  };
  loss();
  layernorm_backward(dinp.data(), dweight.data(), dbias.data(), w.data(), inp.data(), weight.data(), mean.data(),
                     rstd.data(), N, C);
  EXPECT_TRUE(fd_check("dinp", inp, dinp, loss));
  EXPECT_TRUE(fd_check("dweight", weight, dweight, loss));
  EXPECT_TRUE(fd_check("dbias", bias, dbias, loss));
}

class FusedGrad : public ::testing::TestWithParam<bool> {};

TEST_P(FusedGrad, RmsNorm) {
  const bool fused = GetParam();
  const int64_t N = 4, C = 9;
  Vec inp = randn(N * C, 9), weight = randn(C, 10), w = randn(N * C, 11);
  Vec out(N * C), rstd(N), dinp(N * C, 0.0f), dweight(C, 0.0f), scratch(rmsnorm_scratch_floats(N, C));
  auto loss = [&] {
    rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), N, C, 1e-5f, fused, scratch.data());
    return dot(out, w);
  };
  loss();
  rmsnorm_backward(dinp.data(), dweight.data(), w.data(), inp.data(), weight.data(), rstd.data(), N, C, fused,
                   scratch.data());
  EXPECT_TRUE(fd_check("dinp", inp, dinp, loss));
  EXPECT_TRUE(fd_check("dweight", weight, dweight, loss));
}

TEST_P(FusedGrad, BiasSwiglu) {
  const bool fused = GetParam();
  const int64_t N = 3, F = 5;
  Vec inp = randn(N * 2 * F, 12), bias = randn(2 * F, 13), w = randn(N * F, 14);
  Vec out(N * F), dinp(N * 2 * F), dbias(2 * F, 0.0f), scratch(bias_swiglu_scratch_floats(N, F));
  auto loss = [&] {
    bias_swiglu_forward(out.data(), inp.data(), bias.data(), N, F, fused, scratch.data());
    return dot(out, w);
  };
  bias_swiglu_backward(dinp.data(), dbias.data(), w.data(), inp.data(), bias.data(), N, F, fused, scratch.data());
  EXPECT_TRUE(fd_check("dinp", inp, dinp, loss));
  EXPECT_TRUE(fd_check("dbias", bias, dbias, loss));
}

TEST_P(FusedGrad, BiasGelu) {
  const bool fused = GetParam();
  const int64_t N = 3, F = 7;
  Vec inp = randn(N * F, 15, 1.5f), bias = randn(F, 16), w = randn(N * F, 17);
  Vec out(N * F), dinp(N * F), dbias(F, 0.0f), scratch(bias_gelu_scratch_floats(N, F));
  auto loss = [&] {
    bias_gelu_forward(out.data(), inp.data(), bias.data(), N, F, fused, scratch.data());
    return dot(out, w);
  };
  bias_gelu_backward(dinp.data(), dbias.data(), w.data(), inp.data(), bias.data(), N, F, fused, scratch.data());
  EXPECT_TRUE(fd_check("dinp", inp, dinp, loss));
  EXPECT_TRUE(fd_check("dbias", bias, dbias, loss));
}

TEST_P(FusedGrad, BiasDropoutAdd) {
  const bool fused = GetParam();
  const int64_t N = 4, C = 6;
  for (float p : {0.0f, 0.3f}) {
    Vec inp = randn(N * C, 18), bias = randn(C, 19), residual = randn(N * C, 20), w = randn(N * C, 21);
    Vec out(N * C), dinp(N * C), dbias(C, 0.0f), scratch(bias_dropout_add_scratch_floats(N, C));
    auto loss = [&] {
      bias_dropout_add_forward(out.data(), inp.data(), bias.data(), residual.data(), N, C, p, 77, fused,
                               scratch.data());
      return dot(out, w);
    };
    bias_dropout_add_backward(dinp.data(), dbias.data(), w.data(), N, C, p, 77);
    EXPECT_TRUE(fd_check("dinp", inp, dinp, loss)) << "p=" << p;
    EXPECT_TRUE(fd_check("dbias", bias, dbias, loss)) << "p=" << p;
    EXPECT_TRUE(fd_check("dresidual", residual, w, loss)) << "p=" << p;  // the residual's gradient is dout
  }
}

TEST_P(FusedGrad, Rope) {
  const bool fused = GetParam();
  const int64_t B = 2, H = 3, T = 4, D = 6;
  const std::vector<int32_t> positions = {0, 1, 2, 3, 5, 0, 1, 900};
  Vec x = randn(B * H * T * D, 22), w = randn(B * H * T * D, 23), y(x.size()), scratch(rope_scratch_floats(B, H, T, D));
  auto loss = [&] {
    y = x;
    rope_forward(y.data(), positions.data(), B, H, T, D, 10000.0f, fused, scratch.data());
    return dot(y, w);
  };
  Vec dx = w;
  rope_backward(dx.data(), positions.data(), B, H, T, D, 10000.0f, fused, scratch.data());
  EXPECT_TRUE(fd_check("dx", x, dx, loss));
}

// Vr = 5 of V = 7: two padded columns whose logits do not change the loss, so
// their finite-difference gradient (and the kernel's) is 0.
TEST_P(FusedGrad, CrossEntropy) {
  const bool fused = GetParam();
  const int64_t N = 4, V = 7;
  for (const int64_t Vr : {V, int64_t{5}}) {
    SCOPED_TRACE(Vr);
    Vec logits = randn(N * V, 24, 2.0f), dlosses = {0.5f, -1.0f, 0.0f, 2.0f};
    const std::vector<int32_t> targets = {3, 0, static_cast<int32_t>(Vr - 1), 3};
    Vec losses(N), stats(2 * N), dlogits(N * V), scratch(N * V);
    auto loss = [&] {
      cross_entropy_forward(losses.data(), stats.data(), logits.data(), targets.data(), N, V, Vr, fused,
                            scratch.data());
      return dot(losses, dlosses);
    };
    loss();
    cross_entropy_backward(dlogits.data(), logits.data(), stats.data(), targets.data(), dlosses.data(), N, V, Vr, fused,
                           scratch.data());
    EXPECT_TRUE(fd_check("dlogits", logits, dlogits, loss));
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, FusedGrad, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "fused" : "unfused"; });

TEST(DropoutGrad, Plain) {
  const int64_t n = 40;
  Vec inp = randn(n, 25), w = randn(n, 26), out(n), din(n);
  auto loss = [&] {
    dropout_forward(out.data(), inp.data(), 1, n, 0.4f, 5);
    return dot(out, w);
  };
  dropout_backward(din.data(), w.data(), 1, n, 0.4f, 5);
  EXPECT_TRUE(fd_check("din", inp, din, loss));
}

TEST(EmbeddingGrad, TokensAndPositions) {
  const int64_t V = 6, P = 5, C = 4, N = 8;
  const std::vector<int32_t> tokens = {1, 4, 1, 0, 5, 1, 4, 2}, positions = {0, 1, 2, 3, 0, 1, 2, 4};
  Vec wte = randn(V * C, 27), wpe = randn(P * C, 28), w = randn(N * C, 29), out(N * C);
  Vec dwte(V * C, 0.0f), dwpe(P * C, 0.0f);
  auto loss = [&] {
    embedding_forward(out.data(), tokens.data(), positions.data(), wte.data(), wpe.data(), N, C);
    return dot(out, w);
  };
  embedding_backward(dwte.data(), dwpe.data(), w.data(), tokens.data(), positions.data(), N, C);
  EXPECT_TRUE(fd_check("dwte", wte, dwte, loss));
  EXPECT_TRUE(fd_check("dwpe", wpe, dwpe, loss));
}

TEST(LayoutGrad, QkvSplitAndHeadsMerge) {
  const int64_t B = 2, T = 3, G = 2, R = 2, D = 2, H = G * R;
  Vec qkv = randn(B * T * G * (R + 2) * D, 30);
  Vec wq = randn(B * H * T * D, 31), wk = randn(B * G * T * D, 32), wv = randn(B * G * T * D, 33);
  Vec q(wq.size()), k(wk.size()), v(wv.size()), dqkv(qkv.size());
  auto loss = [&] {
    qkv_split_forward(q.data(), k.data(), v.data(), qkv.data(), B, T, G, R, D);
    return dot(q, wq) + dot(k, wk) + dot(v, wv);
  };
  qkv_split_backward(dqkv.data(), wq.data(), wk.data(), wv.data(), B, T, G, R, D);
  EXPECT_TRUE(fd_check("dqkv", qkv, dqkv, loss));

  Vec heads = randn(B * H * T * D, 34), wm = randn(B * T * H * D, 35), merged(wm.size()), dheads(heads.size());
  auto loss2 = [&] {
    heads_merge_forward(merged.data(), heads.data(), B, H, T, D);
    return dot(merged, wm);
  };
  heads_merge_backward(dheads.data(), wm.data(), B, H, T, D);
  EXPECT_TRUE(fd_check("dheads", heads, dheads, loss2));
}

// ---- Attention: flash and unfused (both softmax paths), GQA and MHA, with and
// without doc ids and dropout. ----------------------------------------------------

struct AttnCase {
  bool flash;
  bool softmax_fusion;  // unfused path only
  int64_t H, G;
  bool docs;
  float p;
  int64_t T = 7;
  int64_t max_coords = -1;
};

std::string attn_case_name(const ::testing::TestParamInfo<AttnCase>& info) {
  const AttnCase& c = info.param;
  std::string s = c.flash ? "flash" : (c.softmax_fusion ? "unfused_fusedsoftmax" : "unfused_plainsoftmax");
  s += c.H == c.G ? "_mha" : "_gqa";
  s += c.docs ? "_docs" : "_nodocs";
  s += c.p > 0.0f ? "_dropout" : "_nodropout";
  return s + "_T" + std::to_string(c.T);
}

class AttentionGrad : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionGrad, QKV) {
  const AttnCase c = GetParam();
  const int64_t B = 2, T = c.T, D = 4, H = c.H, G = c.G;
  std::vector<int32_t> doc(B * T);
  for (int64_t t = 0; t < T; ++t) {  // batch 0: docs of length 3; batch 1: a short doc then a long one
    doc[t] = static_cast<int32_t>(t / 3);
    doc[T + t] = t < 2 ? 0 : 1;
  }
  const int32_t* docs = c.docs ? doc.data() : nullptr;
  Vec q = randn(B * H * T * D, 40), k = randn(B * G * T * D, 41), v = randn(B * G * T * D, 42);
  Vec w = randn(B * H * T * D, 43), out(w.size()), lse(B * H * T), probs(B * H * T * T);
  Vec dq(q.size()), dk(k.size()), dv(v.size());
  Vec scratch(c.flash ? attention_flash_scratch_floats(B, H, G, T, D)
                      : attention_unfused_scratch_floats(B, H, G, T, D));
  const uint64_t seed = 99;
  auto loss = [&] {
    if (c.flash)
      attention_flash_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), docs, B, H, G, T, D, c.p, seed,
                              scratch.data());
    else
      attention_unfused_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), docs, B, H, G, T, D, c.p, seed,
                                c.softmax_fusion, scratch.data());
    return dot(out, w);
  };
  loss();
  if (c.flash)
    attention_flash_backward(dq.data(), dk.data(), dv.data(), w.data(), q.data(), k.data(), v.data(), out.data(),
                             lse.data(), docs, B, H, G, T, D, c.p, seed, scratch.data());
  else
    attention_unfused_backward(dq.data(), dk.data(), dv.data(), w.data(), q.data(), k.data(), v.data(), probs.data(),
                               docs, B, H, G, T, D, c.p, seed, scratch.data());
  testing::FdOptions opt;
  opt.max_coords = c.max_coords;
  EXPECT_TRUE(fd_check("dq", q, dq, loss, opt));
  EXPECT_TRUE(fd_check("dk", k, dk, loss, opt));
  EXPECT_TRUE(fd_check("dv", v, dv, loss, opt));
}

std::vector<AttnCase> attention_grad_cases() {
  std::vector<AttnCase> cases;
  for (int path = 0; path < 3; ++path)  // flash, unfused + fused softmax, unfused + plain softmax
    for (auto [H, G] : {std::pair<int64_t, int64_t>{4, 2}, {2, 2}})
      for (bool docs : {false, true})
        for (float p : {0.0f, 0.25f}) cases.push_back({path == 0, path == 1, H, G, docs, p});
  // Several query and key tiles (64 wide) in the flash path, sampled coordinates.
  cases.push_back({true, false, 4, 2, true, 0.25f, 70, 48});
  cases.push_back({true, false, 2, 1, false, 0.0f, 70, 48});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, AttentionGrad, ::testing::ValuesIn(attention_grad_cases()), attn_case_name);

// One ring-attention block (context parallelism): Tq queries against Tk keys,
// a fully visible block and a causal diagonal, rows strided inside a longer
// local sequence (pitch), with documents so that some query rows of the full
// block see no key at all (their out is 0: no gradient). The block's own
// softmax is differentiated: backward takes its out and lse. With attention
// dropout at the block's place in a whole sequence (queries of chunk 3, keys
// of chunk 1 or the same chunk, heads [2, 6) of 8), backward regenerates the
// forward's mask.
TEST(AttentionBlockGrad, FullAndCausalBlocks) {
  const int64_t B = 2, H = 4, G = 2, D = 4, c = 5, pitch = 2 * c;
  std::vector<int32_t> qdoc(B * pitch), kdoc(B * pitch);
  for (int64_t t = 0; t < B * pitch; ++t) {
    qdoc[t] = static_cast<int32_t>(t % pitch % c < 3 ? 1 : 2);  // block rows 0-2: document 1, the rest: 2
    kdoc[t] = static_cast<int32_t>(t % pitch % c < 4 ? 0 : 2);  // keys of documents 0 and 2 only
  }
  for (float p : {0.0f, 0.3f})
    for (bool causal : {false, true})
      for (bool docs : {false, true}) {
        // The block sits in the second half of each pitch (rows [c, 2c)).
        Vec q = randn(B * H * pitch * D, 50), k = randn(B * G * pitch * D, 51), v = randn(B * G * pitch * D, 52);
        Vec w = randn(B * H * pitch * D, 53), out(w.size(), 0.0f), lse(B * H * pitch, 0.0f);
        Vec dq(q.size(), 0.0f), dk(k.size(), 0.0f), dv(v.size(), 0.0f);
        Vec scratch(attention_flash_block_scratch_floats(B, H, G, c, D));
        const int32_t* qd = docs ? qdoc.data() + c : nullptr;
        const int32_t* kd = docs ? (causal ? qdoc.data() : kdoc.data()) + c : nullptr;
        const int64_t o = c * D;
        const BlockDropout dr{p, 9, 2, 8, 8 * c, 3 * c, causal ? 3 * c : c};
        auto loss = [&] {
          attention_flash_block_forward(out.data() + o, lse.data() + c, q.data() + o, k.data() + o, v.data() + o, qd,
                                        kd, B, H, G, c, c, D, pitch, pitch,
                                        causal ? BlockMask::kCausal : BlockMask::kVisible, scratch.data(), dr);
          return dot(out, w);
        };
        loss();
        attention_flash_block_backward(dq.data() + o, dk.data() + o, dv.data() + o, w.data() + o, q.data() + o,
                                       k.data() + o, v.data() + o, out.data() + o, lse.data() + c, qd, kd, B, H, G, c,
                                       c, D, pitch, pitch, causal ? BlockMask::kCausal : BlockMask::kVisible,
                                       scratch.data(), dr);
        const std::string what =
            std::string(causal ? "causal" : "full") + (docs ? " with documents" : "") + (p > 0 ? " with dropout" : "");
        EXPECT_TRUE(fd_check("dq " + what, q, dq, loss));
        EXPECT_TRUE(fd_check("dk " + what, k, dk, loss));
        EXPECT_TRUE(fd_check("dv " + what, v, dv, loss));
        if (docs && !causal) {
          EXPECT_EQ(out[o + 1 * D], 0.0f) << "a row of document 1 sees no key";
        }
      }
}

}  // namespace
}  // namespace mtrain::kernels
