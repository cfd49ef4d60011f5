// Generation with the KV cache computes what a full recompute computes: for
// every generated position the logits row of the cached step equals the row
// of a whole-sequence forward (fp32, bounded by the model's summation
// stages: model_test_util.h kPathRtol), and greedy answers are identical to
// the recompute path and to the training-side greedy_generate.
#include <gtest/gtest.h>

#include <vector>

#include "../model/model_test_util.h"
#include "device/device.h"
#include "infer/inference_session.h"
#include "model/gpt.h"
#include "test_util/fp32_bounds.h"
#include "train/generate.h"

namespace mtrain::infer {
namespace {

model::ModelConfig decode_config(model::ModelConfig c) {
  c.seq_length = 16;
  c.max_positions = 16;
  c.micro_batch = 1;
  return c;
}

// The logits row of position T-1 of a whole-sequence forward over seq[0, T).
std::vector<float> full_forward_row(model::GptModel& m, const std::vector<int32_t>& seq, int64_t T) {
  std::vector<int32_t> pos(T);
  for (int64_t t = 0; t < T; ++t) pos[t] = static_cast<int32_t>(t);
  model::TokenBatch b;
  b.B = 1;
  b.T = T;
  b.tokens = seq.data();
  b.positions = pos.data();
  m.forward(b, 0, /*training=*/false);
  const model::ModelConfig& c = m.config();
  const float* row = m.logits() + (T - 1) * c.padded_vocab;
  return std::vector<float>(row, row + c.vocab);
}

void check_cache_matches_recompute(const model::ModelConfig& c) {
  device::Device dev(device::DeviceProfile{}, 0);
  model::GptModel m(c, dev);
  InferenceSession session(m, dev);
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
  GenerationConfig g;
  g.max_new_tokens = 100;  // bounded by seq_length 16: 11 new tokens
  std::vector<std::vector<float>> rows;
  const std::vector<int32_t> cached =
      session.generate(prompt, g, {}, [&](const std::vector<float>& r) { rows.push_back(r); });
  ASSERT_EQ(cached.size(), 11u);
  ASSERT_EQ(rows.size(), cached.size());
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), cached.begin(), cached.end());
  for (size_t s = 0; s < rows.size(); ++s) {
    SCOPED_TRACE("generated position " + std::to_string(s));
    const std::vector<float> full = full_forward_row(m, seq, static_cast<int64_t>(prompt.size() + s));
    EXPECT_TRUE(testing::close_in_max_norm(rows[s].data(), full.data(), full.size(), model::testing::kPathRtol));
  }
  g.use_cache = false;
  EXPECT_EQ(session.generate(prompt, g), cached);
  EXPECT_EQ(train::greedy_generate(m, prompt, 100, {}), cached);
}

TEST(InferenceSession, CachedLogitsEqualFullRecomputeLlamaGqaRope) {
  check_cache_matches_recompute(decode_config(model::testing::tiny_llama()));
}

// --qk_layernorm: the cache holds keys after k_layernorm and RoPE.
TEST(InferenceSession, CachedLogitsEqualFullRecomputeQwen3QkLayernorm) {
  check_cache_matches_recompute(decode_config(model::testing::tiny_qwen3()));
}

TEST(InferenceSession, CachedLogitsEqualFullRecomputeGpt2LearnedPositions) {
  check_cache_matches_recompute(decode_config(model::testing::tiny_gpt2()));
}

TEST(InferenceSession, StopsAfterAStopIdAndSamplesReproducibly) {
  const model::ModelConfig c = decode_config(model::testing::tiny_llama());
  device::Device dev(device::DeviceProfile{}, 0);
  model::GptModel m(c, dev);
  InferenceSession session(m, dev);
  GenerationConfig g;
  const std::vector<int32_t> greedy = session.generate({3, 1, 4}, g);
  g.stop_ids = {greedy[2]};
  const std::vector<int32_t> stopped = session.generate({3, 1, 4}, g);
  const auto first_stop = std::find(greedy.begin(), greedy.end(), greedy[2]);
  EXPECT_EQ(stopped, std::vector<int32_t>(greedy.begin(), first_stop + 1));

  g.stop_ids.clear();
  g.sampling.temperature = 1.5;
  g.sampling.top_k = 0;
  g.seed = 7;
  InferenceSession a(m, dev), b(m, dev);
  EXPECT_EQ(a.generate({3, 1, 4}, g), b.generate({3, 1, 4}, g));
}

TEST(InferenceSession, TheCacheIsAccountedOnTheDevice) {
  const model::ModelConfig c = decode_config(model::testing::tiny_llama());
  device::Device dev(device::DeviceProfile{}, 0);
  model::GptModel m(c, dev);
  const auto act = [&] { return dev.stats().by_category[static_cast<int>(device::MemCategory::kActivations)]; };
  const int64_t before = act();
  model::KvCache cache(m, dev);
  // k and v per layer: (groups, seq_length, head_dim) fp32, plus the scores row.
  const int64_t expect = c.num_layers * 2 * c.groups * c.seq_length * c.head_dim * 4 + c.seq_length * 4;
  EXPECT_EQ(act() - before, expect);
}

}  // namespace
}  // namespace mtrain::infer
