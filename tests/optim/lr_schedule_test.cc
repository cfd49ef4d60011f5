// LR schedules against hand-computed values of Megatron's get_lr.
#include "optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/errors.h"

namespace mtrain::optim {
namespace {

LrScheduleConfig base(const std::string& style, double lr, double min_lr, int64_t warmup, int64_t decay) {
  LrScheduleConfig c;
  c.style = style;
  c.lr = lr;
  c.min_lr = min_lr;
  c.warmup_iters = warmup;
  c.decay_iters = decay;
  return c;
}

TEST(LrSchedule, LinearWarmupDecayAndFloor) {
  LrScheduler s(base("linear", 1e-3, 1e-4, 10, 110));
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.0);  // warmup starts at lr_warmup_init
  EXPECT_DOUBLE_EQ(s.lr_at(5), 5e-4);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 1e-3);  // warmup boundary is inclusive
  EXPECT_DOUBLE_EQ(s.lr_at(11), 1e-4 + 0.99 * 9e-4);
  EXPECT_DOUBLE_EQ(s.lr_at(60), 5.5e-4);
  EXPECT_DOUBLE_EQ(s.lr_at(110), 1e-4);  // end of decay reaches min_lr
  EXPECT_DOUBLE_EQ(s.lr_at(111), 1e-4);
  EXPECT_DOUBLE_EQ(s.lr_at(100000), 1e-4);
}

TEST(LrSchedule, WarmupFromInitLr) {
  LrScheduleConfig c = base("cosine", 1.0, 0.0, 4, 100);
  c.lr_warmup_init = 0.2;
  LrScheduler s(c);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.2);
  EXPECT_DOUBLE_EQ(s.lr_at(1), 0.4);
  EXPECT_DOUBLE_EQ(s.lr_at(4), 1.0);
}

TEST(LrSchedule, CosineWithoutWarmup) {
  LrScheduler s(base("cosine", 1.0, 0.1, 0, 100));
  EXPECT_DOUBLE_EQ(s.lr_at(0), 1.0);
  EXPECT_NEAR(s.lr_at(25), 0.1 + 0.9 * 0.5 * (std::sqrt(0.5) + 1.0), 1e-15);
  EXPECT_NEAR(s.lr_at(50), 0.55, 1e-15);
  EXPECT_NEAR(s.lr_at(75), 0.1 + 0.9 * 0.5 * (1.0 - std::sqrt(0.5)), 1e-15);
  EXPECT_DOUBLE_EQ(s.lr_at(100), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(101), 0.1);
}

TEST(LrSchedule, ConstantIgnoresDecayAndMinLr) {
  LrScheduler s(base("constant", 3e-4, 1e-5, 2, 10));
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.0);
  EXPECT_DOUBLE_EQ(s.lr_at(1), 1.5e-4);
  EXPECT_DOUBLE_EQ(s.lr_at(2), 3e-4);
  EXPECT_DOUBLE_EQ(s.lr_at(5), 3e-4);
  EXPECT_DOUBLE_EQ(s.lr_at(1000), 3e-4);  // Megatron: constant returns max_lr before the decay check
}

TEST(LrSchedule, InverseSquareRoot) {
  LrScheduler s(base("inverse-square-root", 1.0, 0.1, 4, 1000));
  EXPECT_DOUBLE_EQ(s.lr_at(2), 0.5);  // still warming up
  EXPECT_DOUBLE_EQ(s.lr_at(4), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(16), 0.5);  // sqrt(4)/sqrt(16)
  EXPECT_DOUBLE_EQ(s.lr_at(64), 0.25);
  EXPECT_DOUBLE_EQ(s.lr_at(400), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(900), 0.1);   // 2/30 clamped at min_lr
  EXPECT_DOUBLE_EQ(s.lr_at(1001), 0.1);  // past decay: min_lr

  LrScheduler no_warmup(base("inverse-square-root", 1.0, 0.0, 0, 1000));
  EXPECT_DOUBLE_EQ(no_warmup.lr_at(0), 1.0);  // max(step, 1), max(warmup, 1)
  EXPECT_DOUBLE_EQ(no_warmup.lr_at(4), 0.5);
}

TEST(LrSchedule, WsdPhases) {
  LrScheduleConfig c = base("WSD", 1.0, 0.0, 10, 100);
  c.wsd_decay_iters = 20;
  c.wsd_decay_style = "linear";
  LrScheduler lin(c);
  EXPECT_DOUBLE_EQ(lin.lr_at(5), 0.5);   // warmup
  EXPECT_DOUBLE_EQ(lin.lr_at(50), 1.0);  // stable
  EXPECT_DOUBLE_EQ(lin.lr_at(80), 1.0);  // anneal starts after decay - wsd_decay
  EXPECT_DOUBLE_EQ(lin.lr_at(90), 0.5);
  EXPECT_DOUBLE_EQ(lin.lr_at(100), 0.0);
  EXPECT_DOUBLE_EQ(lin.lr_at(101), 0.0);

  c.min_lr = 0.1;
  c.wsd_decay_style = "exponential";
  LrScheduler ex(c);
  EXPECT_NEAR(ex.lr_at(90), 0.1 + 0.9 * (2.0 * std::sqrt(0.5) - 1.0), 1e-15);
  EXPECT_NEAR(ex.lr_at(100), 0.1, 1e-15);

  c.wsd_decay_style = "cosine";
  EXPECT_NEAR(LrScheduler(c).lr_at(90), 0.55, 1e-15);
  c.wsd_decay_style = "minus_sqrt";
  EXPECT_NEAR(LrScheduler(c).lr_at(85), 0.55, 1e-15);  // ratio 1/4 -> 1 - 1/2
}

TEST(LrSchedule, FractionalWarmupIsNotTruncated) {
  EXPECT_DOUBLE_EQ(warmup_iters_from_fraction(0.015, 100), 1.5);
  for (int64_t spi : {int64_t{1}, int64_t{16}}) {
    LrScheduleConfig c = base("linear", 1.0, 0.0, 0, 100);
    c.warmup_fraction = 0.015;  // 1.5 iterations
    c.samples_per_iteration = spi;
    LrScheduler s(c);
    EXPECT_NEAR(s.lr_at(1), 1.0 / 1.5, 1e-15) << "spi " << spi;
    EXPECT_NEAR(s.lr_at(2), 1.0 - 0.5 / 98.5, 1e-15) << "spi " << spi;
  }
}

TEST(LrSchedule, SamplesPerIterationKeepsExactRatios) {
  LrScheduleConfig c = base("cosine", 2e-4, 2e-5, 7, 93);
  LrScheduler per_iter(c);
  c.samples_per_iteration = 48;
  LrScheduler per_sample(c);
  // Decay ratios are exact quotients of integers, so they do not depend on the unit;
  // the warmup product (lr * steps) / warmup may differ in the last ulp.
  for (int64_t k = 0; k <= 7; ++k) EXPECT_DOUBLE_EQ(per_iter.lr_at(k), per_sample.lr_at(k)) << k;
  for (int64_t k = 8; k < 120; ++k) EXPECT_EQ(per_iter.lr_at(k), per_sample.lr_at(k)) << k;
}

TEST(LrSchedule, RejectsBadConfigs) {
  EXPECT_THROW(LrScheduler(base("cosine", 1.0, 0.0, 100, 100)), ConfigError);  // warmup >= decay
  EXPECT_THROW(LrScheduler(base("cosine", 1.0, 0.0, 0, 0)), ConfigError);      // no decay iters
  EXPECT_THROW(LrScheduler(base("step", 1.0, 0.0, 0, 10)), ConfigError);       // unknown style
  EXPECT_THROW(LrScheduler(base("cosine", 1e-4, 1e-3, 0, 10)), ConfigError);   // lr < min_lr
  LrScheduleConfig c = base("WSD", 1.0, 0.0, 0, 10);
  c.wsd_decay_style = "sqrt";
  EXPECT_THROW((LrScheduler(c)), ConfigError);
  c = base("linear", 1.0, 0.0, 0, 10);
  c.lr_warmup_init = 2.0;
  EXPECT_THROW((LrScheduler(c)), ConfigError);
}

}  // namespace
}  // namespace mtrain::optim
