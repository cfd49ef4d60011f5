// Packing through the real GptModel: a packed row (data/packing.h) gives
// every sample the same per-token losses as that sample run alone, for RoPE
// and learned positions, flash and unfused attention. Without doc_ids the
// later samples' losses change (attention would cross the boundary), which
// shows the comparison can fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "data/loader.h"
#include "data/packing.h"
#include "model_test_util.h"
#include "test_util/fp32_bounds.h"

namespace mtrain::model {
namespace {

std::vector<data::Sample> random_samples(int64_t vocab) {
  Rng rng(11);
  std::vector<data::Sample> samples;
  for (int length : {6, 5, 4}) {
    data::Sample s;
    for (int t = 0; t < length; ++t) {
      s.tokens.push_back(static_cast<int32_t>(rng.next_u64() % vocab));
      s.loss_mask.push_back(t > 1 ? 1 : 0);
    }
    samples.push_back(std::move(s));
  }
  return samples;
}

TokenBatch view(const data::Batch& b, bool docs) {
  TokenBatch t;
  t.B = b.B;
  t.T = b.T;
  t.tokens = b.tokens.data();
  t.targets = b.targets.data();
  t.positions = b.positions.data();
  t.doc_ids = docs ? b.doc_ids.data() : nullptr;
  return t;
}

std::vector<float> losses_of(GptModel& m, const data::Batch& b, bool docs) {
  m.forward(view(b, docs), 3, /*training=*/false);
  return std::vector<float>(m.losses(), m.losses() + b.B * b.T);
}

struct Case {
  std::string name;
  ModelConfig config;
};

class PackedLoss : public ::testing::TestWithParam<Case> {};

TEST_P(PackedLoss, EachSampleLosesWhatItLosesAlone) {
  ModelConfig c = GetParam().config;
  c.micro_batch = 1;
  c.seq_length = 16;
  device::Device dev(device::DeviceProfile{}, 0);
  GptModel m(c, dev);
  const std::vector<data::Sample> samples = random_samples(c.vocab);
  const std::vector<data::Sample> rows = data::pack_samples(samples, 16);
  ASSERT_EQ(rows.size(), 1u);
  const data::Batch packed = data::make_batch(rows, std::vector<int64_t>{0}, 16, 0);
  const std::vector<float> packed_losses = losses_of(m, packed, true);
  const std::vector<float> crossing = losses_of(m, packed, false);

  size_t offset = 0;
  // Packed and alone rows differ in GEMM shapes, hence in summation order:
  // per-token losses agree to kPathRtol of their max norm (model_test_util.h).
  double packed_sum = 0, alone_sum = 0, crossing_diff = 0, sum_bound = 0;
  for (size_t i = 0; i < samples.size(); ++i) {  // rows hold the samples longest first: here in order
    const data::Batch alone = data::make_batch(samples, std::vector<int64_t>{static_cast<int64_t>(i)}, 16, 0);
    const std::vector<float> alone_losses = losses_of(m, alone, true);
    const auto n = samples[i].tokens.size() - 1;
    EXPECT_TRUE(mtrain::testing::close_in_max_norm(&packed_losses[offset], alone_losses.data(), n, testing::kPathRtol))
        << "sample " << i;
    if (i > 0) {  // the bound is tight enough to see a sample attend to the one before it
      EXPECT_FALSE(mtrain::testing::close_in_max_norm(&crossing[offset], alone_losses.data(), n, testing::kPathRtol))
          << "sample " << i;
    }
    const float max_loss = *std::max_element(alone_losses.begin(), alone_losses.begin() + n);  // losses >= 0
    for (size_t t = 0; t < n; ++t) {
      sum_bound += testing::kPathRtol * max_loss * alone.loss_weights[t];
      packed_sum += packed.loss_weights[offset + t] * packed_losses[offset + t];
      alone_sum += alone.loss_weights[t] * alone_losses[t];
      if (i > 0) crossing_diff += std::abs(crossing[offset + t] - alone_losses[t]);
    }
    offset += n + 1;
  }
  EXPECT_NEAR(packed_sum, alone_sum, sum_bound);
  EXPECT_GT(crossing_diff, 1e-3) << "without doc_ids the later samples would see the earlier ones";
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (bool flash : {true, false}) {
    const std::string a = flash ? "flash" : "unfused";
    ModelConfig llama = testing::tiny_llama(), gpt2 = testing::tiny_gpt2();
    llama.fusions.flash_attention = gpt2.fusions.flash_attention = flash;
    out.push_back({"rope_" + a, llama});
    out.push_back({"learned_positions_" + a, gpt2});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Variants, PackedLoss, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace mtrain::model
