// Dropout masks follow the token, not the buffer: token t of sequence b draws
// the same mask whatever the batch was padded to and whichever sequence-
// parallel shard holds it (the promise that a TP/SP run equals the
// single-device run with dropout on). Expected masks come from the counter
// definition (common/rng.h: keep iff uniform01(seed, index) >= p), not from
// the kernels.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "common/rng.h"
#include "kernel_test_util.h"
#include "tensor/activation.h"
#include "tensor/attention.h"
#include "test_util/fp32_bounds.h"

namespace mtrain::kernels {
namespace {

using testing::bit_equal;
using testing::randn;
using testing::Vec;

constexpr int64_t B = 3, T = 5, T_pad = 8, C = 6;  // T_pad: the --seq_length numbering and the padded batch
constexpr float kP = 0.4f;
constexpr uint64_t kSeed = 2024;

// The multiplier of column j of token (b, t) by the counter definition.
float want_multiplier(int64_t b, int64_t t, int64_t j) {
  const uint64_t index = static_cast<uint64_t>((b * T_pad + t) * C + j);
  return uniform01(kSeed, index) >= kP ? 1.0f / (1.0f - kP) : 0.0f;
}

// dropout(ones) of a (B, T_rows) batch, rows [row0, row0 + rows) only.
Vec hidden_mask(int64_t T_rows, int64_t row0, int64_t rows, bool fused_bda) {
  const Vec ones(rows * C, 1.0f), zeros(rows * C, 0.0f);
  Vec out(rows * C), scratch(rows * C);
  const TokenNumbering numbering{row0, T_rows, T_pad};
  if (fused_bda) {
    bias_dropout_add_forward(out.data(), ones.data(), nullptr, zeros.data(), rows, C, kP, kSeed, true, nullptr,
                             numbering);
  } else {
    dropout_forward(out.data(), ones.data(), rows, C, kP, kSeed, numbering);
  }
  return out;
}

TEST(DropoutNumbering, HiddenMaskOfATokenIgnoresPaddingAndShard) {
  for (bool bda : {false, true}) {
    const Vec unpadded = hidden_mask(T, 0, B * T, bda), whole = hidden_mask(T_pad, 0, B * T_pad, bda);
    Vec shards;  // the padded batch as two sequence-parallel shards
    for (int64_t r = 0; r < 2; ++r) {
      const Vec s = hidden_mask(T_pad, r * B * T_pad / 2, B * T_pad / 2, bda);
      shards.insert(shards.end(), s.begin(), s.end());
    }
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < C; ++j) {
          const float want = want_multiplier(b, t, j);
          ASSERT_EQ(unpadded[(b * T + t) * C + j], want) << "unpadded b=" << b << " t=" << t << " bda=" << bda;
          ASSERT_EQ(whole[(b * T_pad + t) * C + j], want) << "padded b=" << b << " t=" << t << " bda=" << bda;
          ASSERT_EQ(shards[(b * T_pad + t) * C + j], want) << "SP shard b=" << b << " t=" << t << " bda=" << bda;
        }
  }
}

// Full-length rows (T == --seq_length) keep the flat numbering of before, so
// unpadded runs draw the masks they always drew.
TEST(DropoutNumbering, FullLengthRowsKeepTheFlatNumbering) {
  const Vec ones(B * T_pad * C, 1.0f);
  Vec flat(ones.size()), numbered(ones.size());
  dropout_forward(flat.data(), ones.data(), B * T_pad, C, kP, kSeed);
  dropout_forward(numbered.data(), ones.data(), B * T_pad, C, kP, kSeed, TokenNumbering{0, T_pad, T_pad});
  EXPECT_TRUE(bit_equal(flat, numbered));
}

// Context parallelism: CP rank r of P holds chunks r and 2P-1-r (T_pad / 2P
// positions each) of every sequence. Its rows, alone or as a sequence-
// parallel shard of them, draw the masks of those positions in the whole
// batch, for P = 2 and 4 and both dropout kernels.
TEST(DropoutNumbering, HiddenMaskOfAContextParallelRankIsItsSliceOfTheWholeMask) {
  for (int64_t P : {2, 4})
    for (bool bda : {false, true})
      for (int64_t r = 0; r < P; ++r) {
        const int64_t T_loc = T_pad / P, c = T_loc / 2, N_loc = B * T_loc;
        const Vec ones(N_loc * C, 1.0f), zeros(N_loc * C, 0.0f);
        auto mask = [&](int64_t row0, int64_t rows) {  // rows [row0, row0 + rows) of this rank's N_loc
          Vec out(rows * C);
          const TokenNumbering numbering{row0, T_loc, T_pad, P, r};
          if (bda)
            bias_dropout_add_forward(out.data(), ones.data(), nullptr, zeros.data(), rows, C, kP, kSeed, true, nullptr,
                                     numbering);
          else
            dropout_forward(out.data(), ones.data(), rows, C, kP, kSeed, numbering);
          return out;
        };
        const Vec mine = mask(0, N_loc), second_sp_shard = mask(N_loc / 2, N_loc / 2);
        for (int64_t b = 0; b < B; ++b)
          for (int64_t t = 0; t < T_loc; ++t) {
            const int64_t chunk = t < c ? r : 2 * P - 1 - r, pos = chunk * c + t % c;
            for (int64_t j = 0; j < C; ++j) {
              const float want = want_multiplier(b, pos, j);
              const int64_t row = b * T_loc + t;
              ASSERT_EQ(mine[row * C + j], want) << "CP " << P << " rank " << r << " b=" << b << " t=" << t;
              if (row >= N_loc / 2) {
                ASSERT_EQ(second_sp_shard[(row - N_loc / 2) * C + j], want) << "SP shard, CP rank " << r;
              }
            }
          }
      }
}

// Attention outputs of the real positions, (B, H, T, D), from a batch padded
// to T_rows (the padding keys sit after every real query: causally invisible).
struct AttnRun {
  Vec out, dq;
};
AttnRun attention_real_rows(int64_t T_rows, int64_t mask_seq, bool flash) {
  const int64_t H = 2, G = 1, D = 4;
  const Vec q0 = randn(B * H * T_pad * D, 5), k0 = randn(B * G * T_pad * D, 6), v0 = randn(B * G * T_pad * D, 7),
            g0 = randn(B * H * T_pad * D, 8);
  // Row-major (B, heads, T_rows, D) copies whose first T positions are shared.
  auto rows_of = [&](const Vec& x, int64_t heads, bool zero_pad) {
    Vec y(B * heads * T_rows * D, 0.0f);
    for (int64_t bh = 0; bh < B * heads; ++bh)
      for (int64_t t = 0; t < T_rows; ++t)
        for (int64_t e = 0; e < D; ++e)
          y[(bh * T_rows + t) * D + e] = (zero_pad && t >= T) ? 0.0f : x[(bh * T_pad + t) * D + e];
    return y;
  };
  const Vec q = rows_of(q0, H, false), k = rows_of(k0, G, false), v = rows_of(v0, G, false), g = rows_of(g0, H, true);
  Vec out(q.size()), stats(B * H * T_rows * std::max<int64_t>(T_rows, 1)), dq(q.size()), dk(k.size()), dv(v.size());
  Vec scratch(std::max(attention_unfused_scratch_floats(B, H, G, T_rows, D),
                       attention_flash_scratch_floats(B, H, G, T_rows, D)));
  if (flash) {
    attention_flash_forward(out.data(), stats.data(), q.data(), k.data(), v.data(), nullptr, B, H, G, T_rows, D, kP,
                            kSeed, scratch.data(), 0, 0, mask_seq);
    attention_flash_backward(dq.data(), dk.data(), dv.data(), g.data(), q.data(), k.data(), v.data(), out.data(),
                             stats.data(), nullptr, B, H, G, T_rows, D, kP, kSeed, scratch.data(), 0, 0, mask_seq);
  } else {
    attention_unfused_forward(out.data(), stats.data(), q.data(), k.data(), v.data(), nullptr, B, H, G, T_rows, D, kP,
                              kSeed, true, scratch.data(), 0, 0, mask_seq);
    attention_unfused_backward(dq.data(), dk.data(), dv.data(), g.data(), q.data(), k.data(), v.data(), stats.data(),
                               nullptr, B, H, G, T_rows, D, kP, kSeed, scratch.data(), 0, 0, mask_seq);
  }
  AttnRun r;
  for (int64_t bh = 0; bh < B * H; ++bh) {
    r.out.insert(r.out.end(), out.begin() + bh * T_rows * D, out.begin() + (bh * T_rows + T) * D);
    r.dq.insert(r.dq.end(), dq.begin() + bh * T_rows * D, dq.begin() + (bh * T_rows + T) * D);
  }
  return r;
}

TEST(DropoutNumbering, AttentionMaskOfAPositionIgnoresPadding) {
  omp_set_num_threads(1);
  // The two runs sum the same products over T vs T_pad keys (the extra ones
  // exactly 0): per path softmax and P·V within gamma(2*T_pad + 2), twice.
  const double rtol = 2 * mtrain::testing::fp32_gamma(2 * T_pad + 2);
  for (bool flash : {true, false}) {
    const AttnRun unpadded = attention_real_rows(T, T_pad, flash), padded = attention_real_rows(T_pad, T_pad, flash);
    EXPECT_TRUE(mtrain::testing::close_in_max_norm(padded.out.data(), unpadded.out.data(), unpadded.out.size(), rtol))
        << "forward, flash=" << flash;
    EXPECT_TRUE(mtrain::testing::close_in_max_norm(padded.dq.data(), unpadded.dq.data(), unpadded.dq.size(), rtol))
        << "backward, flash=" << flash;
    // Control: numbered by the batch's own length, the masks move.
    const AttnRun by_length = attention_real_rows(T, 0, flash);
    EXPECT_FALSE(
        mtrain::testing::close_in_max_norm(padded.out.data(), by_length.out.data(), by_length.out.size(), rtol))
        << "flash=" << flash;
  }
}

}  // namespace
}  // namespace mtrain::kernels
