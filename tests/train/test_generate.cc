// Greedy generation picks the argmax over the real vocabulary: a padded id
// (Megatron's dummy rows) is never an answer, even when its logit is the
// largest of the row, whether or not the loss masks it.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "../model/model_test_util.h"
#include "device/device.h"
#include "model/gpt.h"
#include "train/generate.h"

namespace mtrain::train {
namespace {

TEST(Generate, NeverPicksAPaddedVocabularyId) {
  for (const bool mask : {true, false}) {
    SCOPED_TRACE(mask ? "masked" : "--mask_padded_vocab false");
    model::ModelConfig c = model::testing::tiny_llama();  // 29 ids padded to 32 (untied output layer)
    c.mask_padded_vocab = mask;
    device::Device dev(device::DeviceProfile{}, 0);
    model::GptModel m(c, dev);
    const std::vector<int32_t> prompt = {3, 1, 4};
    const int64_t last = static_cast<int64_t>(prompt.size()) - 1, V = c.padded_vocab, C = c.hidden;
    ASSERT_EQ(greedy_generate(m, prompt, 1, {}).size(), 1u);

    // Make padded id 29 the row's winner: its output row becomes 10 x sign(l_j) x row j, j the real id of largest
    // |logit| l_j, so its logit is 10 |l_j| > every real logit.
    const float* logits = m.logits() + last * V;
    int64_t j = 0;
    for (int64_t v = 0; v < c.vocab; ++v)
      if (std::fabs(logits[v]) > std::fabs(logits[j])) j = v;
    ASSERT_GT(std::fabs(logits[j]), 0.0f);
    const float scale = logits[j] > 0 ? 10.0f : -10.0f;
    float* w = m.params().param(m.params().find("output_layer.weight"));
    for (int64_t k = 0; k < C; ++k) w[c.vocab * C + k] = scale * w[j * C + k];

    const std::vector<int32_t> out = greedy_generate(m, prompt, 1, {});
    ASSERT_EQ(out.size(), 1u);
    int64_t best_real = 0;
    for (int64_t v = 0; v < c.vocab; ++v) {
      EXPECT_GT(logits[c.vocab], logits[v]) << "the padded logit must be the largest (test setup)";
      if (logits[v] > logits[best_real]) best_real = v;
    }
    EXPECT_EQ(out[0], best_real) << "the argmax over the 29 real ids, not a padded id";
  }
}

}  // namespace
}  // namespace mtrain::train
