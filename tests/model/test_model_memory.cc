// Device accounting of the model: parameter bytes by dtype, a clear OOM error
// when the plan does not fit, meta (shape-only) models that account without
// storage.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/errors.h"
#include "model_test_util.h"
#include "test_util/bf16_reference.h"

namespace mtrain::model {
namespace {

using mtrain::testing::bf16_reference;

TEST(ModelMemory, WeightsAndGradsAreAccountedByDtype) {
  for (DType t : {DType::kF32, DType::kBF16}) {
    device::Device dev(device::DeviceProfile{}, 0);
    ModelConfig c = testing::tiny_llama();
    c.dtype = t;
    GptModel m(c, dev);
    const auto& by = dev.stats().by_category;
    EXPECT_EQ(by[static_cast<int>(device::MemCategory::kWeights)], m.params().numel() * dtype_bytes(t));
    EXPECT_EQ(by[static_cast<int>(device::MemCategory::kGrads)], m.params().numel() * 4);
    EXPECT_GT(by[static_cast<int>(device::MemCategory::kActivations)], 0);
  }
}

// --grad_reduce_in_bf16: the gradient buffer takes 2 bytes a parameter and
// each micro-batch's accumulation lands in bf16 (Megatron's main_grad of the
// parameter dtype): after micro-batches 1 and 2 it is bf16(bf16(g1) + g2),
// g1 and g2 the fp32 gradients of each alone. The accumulating GEMM adds in
// another order than the sum here, which can move a tie to the next bf16
// value: within one bf16 step of it, and every element a bf16 value.
TEST(ModelMemory, Bf16MainGradsTakeTwoBytesAndHoldEachMicroBatchSumInBf16) {
  ModelConfig c = testing::tiny_llama();
  c.dtype = DType::kBF16;
  const testing::RandomBatch r1 = testing::random_batch(2, c.seq_length, c.vocab, 1);
  const testing::RandomBatch r2 = testing::random_batch(2, c.seq_length, c.vocab, 2);
  auto grads_of = [&](GptModel& m, const std::vector<const testing::RandomBatch*>& rs) {
    for (size_t i = 0; i < rs.size(); ++i) {
      const TokenBatch b = rs[i]->view(2, c.seq_length, false);
      m.forward(b, 7, true);
      m.backward(b, rs[i]->weights.data(), 7, true, /*zero_grads=*/i == 0);
    }
    return std::vector<float>(m.params().grads().data(), m.params().grads().data() + m.params().numel());
  };
  device::Device d32(device::DeviceProfile{}, 0), d16(device::DeviceProfile{}, 1);
  GptModel fp32(c, d32);
  const std::vector<float> g1 = grads_of(fp32, {&r1}), g2 = grads_of(fp32, {&r2});
  c.grad_dtype = DType::kBF16;
  GptModel bf16(c, d16);
  EXPECT_EQ(d16.stats().by_category[static_cast<int>(device::MemCategory::kGrads)], 2 * bf16.params().numel());
  // One micro-batch into zeroed grads: the fp32 run's gradients rounded to bf16, exactly (the same
  // kernels in the same order; only the rounding is added).
  const std::vector<float> one = grads_of(bf16, {&r1});
  int64_t unequal = 0;
  for (size_t i = 0; i < one.size(); ++i) unequal += one[i] != static_cast<float>(bf16_reference(g1[i]));
  EXPECT_EQ(unequal, 0);
  const std::vector<float> g = grads_of(bf16, {&r1, &r2});
  int64_t off = 0, not_bf16 = 0, rounded = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double want = bf16_reference(bf16_reference(g1[i]) + g2[i]);
    const double step = std::max(std::abs(want), 1e-30) * std::ldexp(1.0, -7);
    off += std::abs(g[i] - want) > step;
    not_bf16 += bf16_reference(g[i]) != g[i];
    rounded += want != static_cast<double>(g1[i]) + g2[i];
  }
  EXPECT_EQ(off, 0);
  EXPECT_EQ(not_bf16, 0);
  EXPECT_GT(rounded, 0) << "the case rounds";
}

TEST(ModelMemory, TooLargeForTheDeviceIsAnOutOfMemoryError) {
  device::DeviceProfile small;
  small.name = "tiny";
  small.hbm_bytes = 64LL << 20;
  device::Device dev(small, 0);
  ModelConfig c = testing::tiny_llama();
  c.hidden = 4096;
  c.ffn = 11008;
  c.heads = 32;
  c.groups = 32;
  c.head_dim = 128;
  try {
    GptModel m(c, dev, /*meta=*/true);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("out of memory"), std::string::npos) << msg;
    EXPECT_NE(msg.find("HBM capacity 64.00 MiB"), std::string::npos) << msg;
    EXPECT_EQ(e.code(), ExitCode::kOutOfMemory);
  }
  EXPECT_EQ(dev.stats().allocated, 0) << "a failed construction must give every byte back";
}

TEST(ModelMemory, MetaModelAccountsWithoutStorage) {
  device::Device dev(device::DeviceProfile{}, 0);
  ModelConfig c = testing::tiny_llama();
  c.num_layers = 32;
  c.hidden = 4096;
  c.ffn = 11008;
  c.heads = 32;
  c.groups = 32;
  c.head_dim = 128;
  c.vocab = 32000;
  c.padded_vocab = 32000;
  c.seq_length = 16;
  GptModel m(c, dev, /*meta=*/true);
  EXPECT_EQ(m.params().params().data(), nullptr);
  // Llama-2-7B has 6.74e9 parameters: 4 bytes each in fp32.
  EXPECT_NEAR(static_cast<double>(m.params().numel()), 6.74e9, 0.01e9);
}

TEST(ModelMemory, RecomputeFullHoldsOneLayerOfActivations) {
  auto act_bytes = [](Recompute r, int64_t block_layers) {
    device::Device dev(device::DeviceProfile{}, 0);
    ModelConfig c = testing::tiny_llama();
    c.num_layers = 4;
    c.recompute = r;
    c.recompute_block_layers = block_layers;
    GptModel m(c, dev);
    return dev.stats().by_category[static_cast<int>(device::MemCategory::kActivations)];
  };
  EXPECT_LT(act_bytes(Recompute::kFull, 0), act_bytes(Recompute::kFull, 2));
  EXPECT_LT(act_bytes(Recompute::kFull, 2), act_bytes(Recompute::kNone, 0));
}

}  // namespace
}  // namespace mtrain::model
