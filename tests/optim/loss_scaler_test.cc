// Loss scalers against Megatron's grad_scaler.py sequences.
#include "optim/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/errors.h"

namespace mtrain::optim {
namespace {

const double k2_32 = std::ldexp(1.0, 32);

void clean_steps(DynamicGradScaler& s, int n) {
  for (int i = 0; i < n; ++i) s.update(false);
}

TEST(DynamicGradScaler, DefaultsMatchMegatron) {
  DynamicGradScaler s{DynamicGradScalerConfig{}};
  EXPECT_EQ(s.scale(), k2_32);
  EXPECT_EQ(s.inv_scale(), std::ldexp(1.0f, -32));
  const DynamicGradScalerState st = s.state();
  EXPECT_EQ(st.growth_tracker, 0);
  EXPECT_EQ(st.hysteresis_tracker, 2);
}

TEST(DynamicGradScaler, BacksOffOnlyAfterHysteresisOverflows) {
  DynamicGradScaler s{DynamicGradScalerConfig{}};
  s.update(true);
  EXPECT_EQ(s.scale(), k2_32) << "first overflow is absorbed by hysteresis 2";
  s.update(true);
  EXPECT_EQ(s.scale(), k2_32 / 2);
  // Clean steps do not restore the hysteresis tracker: the next overflow backs off at once.
  clean_steps(s, 5);
  s.update(true);
  EXPECT_EQ(s.scale(), k2_32 / 4);
  EXPECT_EQ(s.state().hysteresis_tracker, -1);
}

TEST(DynamicGradScaler, GrowsAfterWindowAndResetsHysteresis) {
  DynamicGradScaler s{DynamicGradScalerConfig{}};
  s.update(true);
  s.update(true);  // 2^31, hysteresis tracker 0
  clean_steps(s, 999);
  EXPECT_EQ(s.scale(), k2_32 / 2);
  s.update(false);  // the 1000th clean step
  EXPECT_EQ(s.scale(), k2_32);
  EXPECT_EQ(s.state().growth_tracker, 0);
  EXPECT_EQ(s.state().hysteresis_tracker, 2);
  s.update(true);
  EXPECT_EQ(s.scale(), k2_32) << "hysteresis was restored by the growth";
  s.update(true);
  EXPECT_EQ(s.scale(), k2_32 / 2);
}

TEST(DynamicGradScaler, OverflowResetsTheGrowthWindow) {
  DynamicGradScaler s{DynamicGradScalerConfig{}};
  clean_steps(s, 999);
  s.update(true);  // tracker 1, no back-off; growth window restarts
  clean_steps(s, 999);
  EXPECT_EQ(s.scale(), k2_32);
  s.update(false);
  EXPECT_EQ(s.scale(), 2 * k2_32);
}

TEST(DynamicGradScaler, NeverBelowMinScale) {
  DynamicGradScalerConfig c;
  c.initial_scale = 4.0;
  c.min_scale = 1.0;
  c.hysteresis = 1;
  DynamicGradScaler s(c);
  const double want[] = {2.0, 1.0, 1.0, 1.0};
  for (double w : want) {
    s.update(true);
    EXPECT_EQ(s.scale(), w);
  }
}

TEST(DynamicGradScaler, StateRoundTrip) {
  DynamicGradScaler a{DynamicGradScalerConfig{}};
  a.update(true);
  clean_steps(a, 17);
  DynamicGradScaler b{DynamicGradScalerConfig{}};
  b.load_state(a.state());
  for (bool inf : {false, true, true, false}) {
    a.update(inf);
    b.update(inf);
    EXPECT_EQ(a.scale(), b.scale());
  }
  EXPECT_EQ(a.state().growth_tracker, b.state().growth_tracker);
  EXPECT_EQ(a.state().hysteresis_tracker, b.state().hysteresis_tracker);
}

TEST(DynamicGradScaler, RejectsBadConfigs) {
  DynamicGradScalerConfig c;
  c.min_scale = 2.0 * c.initial_scale;
  EXPECT_THROW(DynamicGradScaler{c}, ConfigError);
  c = DynamicGradScalerConfig{};
  c.backoff_factor = 1.0;
  EXPECT_THROW(DynamicGradScaler{c}, ConfigError);
  c = DynamicGradScalerConfig{};
  c.hysteresis = 0;
  EXPECT_THROW(DynamicGradScaler{c}, ConfigError);
}

TEST(ConstantGradScaler, NeverChanges) {
  ConstantGradScaler s(128.0);
  for (bool inf : {true, true, true, false}) {
    s.update(inf);
    EXPECT_EQ(s.scale(), 128.0);
  }
  EXPECT_EQ(s.inv_scale(), 1.0f / 128.0f);
  EXPECT_THROW(ConstantGradScaler(0.0), ConfigError);
}

TEST(MakeGradScaler, FollowsMegatronChoice) {
  const DynamicGradScalerConfig dyn;
  EXPECT_EQ(make_grad_scaler(DType::kF32, 0.0, dyn), nullptr);
  EXPECT_EQ(make_grad_scaler(DType::kF32, 64.0, dyn), nullptr);
  EXPECT_EQ(make_grad_scaler(DType::kBF16, 0.0, dyn), nullptr);
  auto bf16_const = make_grad_scaler(DType::kBF16, 64.0, dyn);
  ASSERT_NE(dynamic_cast<ConstantGradScaler*>(bf16_const.get()), nullptr);
  EXPECT_EQ(bf16_const->scale(), 64.0);
  auto fp16 = make_grad_scaler(DType::kF16, 0.0, dyn);
  ASSERT_NE(dynamic_cast<DynamicGradScaler*>(fp16.get()), nullptr);
  EXPECT_EQ(fp16->scale(), k2_32);
  ASSERT_NE(dynamic_cast<ConstantGradScaler*>(make_grad_scaler(DType::kF16, 8.0, dyn).get()), nullptr);
}

TEST(OverflowCheck, FindsInfAndNanAndUnscales) {
  std::vector<float> g = {1.0f, -2.0f, 3.0f, 4.0f};
  EXPECT_FALSE(found_inf(g.data(), 4));
  unscale_grads(g.data(), 4, 0.25f);
  EXPECT_EQ(g, (std::vector<float>{0.25f, -0.5f, 0.75f, 1.0f}));
  g[2] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(found_inf(g.data(), 4));
  g[2] = -std::numeric_limits<float>::infinity();
  EXPECT_TRUE(found_inf(g.data(), 4));
  g[2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(found_inf(g.data(), 4));
}

}  // namespace
}  // namespace mtrain::optim
