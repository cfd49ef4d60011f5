// The log line and validation line must be Megatron-LM's training_log format
// to the character (users grep and parse them).
#include <gtest/gtest.h>

#include "observe/logger.h"

namespace mtrain::observe {
namespace {

TEST(MegatronLogLine, MatchesTheReferenceRendering) {
  StepMetrics m;
  m.iteration = 10;
  m.train_iters = 100;
  m.consumed_samples = 160;
  m.learning_rate = 1e-5;
  m.global_batch_size = 16;
  m.loss_scale = 1.0;
  m.grad_norm = 1.2344;
  const std::string line = format_log_line(m, 2.345678, 1234.56, 0, 0, nullptr, "2025-01-01 12:00:00");
  EXPECT_EQ(line,
            " [2025-01-01 12:00:00] iteration       10/     100 | consumed samples:          160 | elapsed time per "
            "iteration (ms): 1234.6 | learning rate: 1.000000E-05 | global batch size:    16 | lm loss: 2.345678E+00 "
            "| loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   "
            "0 |");
}

// MoE router losses follow the lm loss like the rest of Megatron's
// total_loss_dict, each only when positive.
TEST(MegatronLogLine, RouterLossesFollowTheLmLoss) {
  StepMetrics m;
  const std::string line =
      format_log_line(m, 2.5, 10.0, 0, 0, nullptr, "T", {{"z_loss", 0.0}, {"load_balancing_loss", 1.0312345}});
  EXPECT_NE(line.find("| lm loss: 2.500000E+00 | load_balancing_loss: 1.031235E+00 | loss scale:"), std::string::npos)
      << line;
  EXPECT_EQ(line.find("z_loss"), std::string::npos) << line;
}

// Over a log interval the router losses are summed (skipped iterations
// too, as Megatron's tracker adds them) and divided by the iterations that
// advanced: (1 + 2 + 6) / 2 advanced = 4.5.
TEST(MegatronLogLine, RouterLossesAveragedOverTheInterval) {
  device::Device dev(device::DeviceProfile{}, 0);
  LoggerOptions o;
  o.log_interval = 3;
  o.print_memory = false;
  MegatronLogger logger(o, dev);
  ::testing::internal::CaptureStdout();
  for (int it = 1; it <= 3; ++it) {
    StepMetrics m;
    m.iteration = it;
    m.train_iters = 3;
    m.lm_loss = 1.0;
    m.skipped = it == 2;
    m.aux_losses = {{"load_balancing_loss", it == 3 ? 6.0 : it}};
    logger.on_step_end(m);
  }
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("| load_balancing_loss: 4.500000E+00 |"), std::string::npos) << out;
}

TEST(MegatronLogLine, ThroughputAndCountersAndZeroLoss) {
  StepMetrics m;
  m.iteration = 5;
  m.train_iters = 5;
  m.consumed_samples = 80;
  m.learning_rate = 3e-4;
  m.global_batch_size = 16;
  m.loss_scale = 65536;
  m.grad_norm = 0.5;
  LogThroughput tp;
  tp.tflops_per_gpu = 1.04;
  const std::string line = format_log_line(m, 0.0, 1000.0, 2, 1, &tp, "T");
  // Megatron's place: right after the elapsed time, before the learning rate.
  EXPECT_NE(line.find("| elapsed time per iteration (ms): 1000.0 | throughput per GPU (TFLOP/s/GPU): 1.0 | learning "
                      "rate: 3.000000E-04 |"),
            std::string::npos)
      << line;
  EXPECT_EQ(line.find("simulated"), std::string::npos) << line;
  EXPECT_EQ(line.find("lm loss"), std::string::npos) << "Megatron omits a loss <= 0";
  EXPECT_NE(line.find("| loss scale: 65536.0 |"), std::string::npos) << line;
  EXPECT_NE(line.find("| number of skipped iterations:   2 | number of nan iterations:   1 |"), std::string::npos);
}

TEST(MegatronLogLine, SimulatedDeviceTimeFollowsTheThroughput) {
  StepMetrics m;
  LogThroughput tp;
  tp.tflops_per_gpu = 0.26;
  tp.simulated = true;
  tp.simulated_ms = 1.23456;
  tp.simulated_tflops_per_gpu = 87.66;
  const std::string line = format_log_line(m, 1.0, 10.0, 0, 0, &tp, "T");
  EXPECT_NE(line.find("| throughput per GPU (TFLOP/s/GPU): 0.3 | simulated device time per iteration (ms): 1.235 | "
                      "simulated throughput per GPU (TFLOP/s/GPU): 87.7 | learning rate:"),
            std::string::npos)
      << line;
}

TEST(MegatronLogLine, ValidationLine) {
  EXPECT_EQ(format_validation_line("iteration 100", 2.1),
            " validation loss at iteration 100 | lm loss value: 2.100000E+00 | lm loss PPL: 8.166170E+00 | ");
  // PPL is exp(min(20, loss)).
  EXPECT_NE(format_validation_line("iteration 1", 50.0).find("lm loss PPL: 4.851652E+08"), std::string::npos);
}

}  // namespace
}  // namespace mtrain::observe
