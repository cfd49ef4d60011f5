// Device accounting of the model: parameter bytes by dtype, a clear OOM error
// when the plan does not fit, meta (shape-only) models that account without
// storage.
#include <gtest/gtest.h>

#include <string>

#include "common/errors.h"
#include "model_test_util.h"

namespace mtrain::model {
namespace {

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
