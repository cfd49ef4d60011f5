// --log_throughput on a real run: the log line's Megatron throughput is
// Megatron's FLOPs per iteration (estimator-formulas.md §1d, written out
// here from the model's shape) over the logged elapsed time and the world
// size; the simulated device time is what a dry run of the same flags
// predicts (with one stage: its step time; with a pipeline: the last
// stage's busy time, the rank that prints the line); without the flag the
// line and logging.jsonl carry none of it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "plan/dry_run.h"
#include "plan/dry_run_fixture.h"
#include "plan/step_time.h"

namespace mtrain::plan {
namespace {

class LogThroughput : public DryRunTest {
 protected:
  // Pretraining on the demo corpus: every row is --seq_length tokens, the
  // shape a dry run feeds, so the real step and the dry step run the same kernels.
  std::string pretrain(const std::string& extra) const {
    return "pt --model_preset demo --tokenizer configs/demo/tokenizer.json --dataset configs/demo/pt.txt "
           "--seq_length 32 --train_iters 1 --log_interval 1 --lr_warmup_iters 0 --micro_batch_size 2 "
           "--global_batch_size 8 --eval_interval 0 --num_generate_samples 0 --num_threads 1 --output_dir " +
           out_.string() + " " + extra;
  }
  // The last logging.jsonl object of the run, and the printed log line.
  struct Logged {
    nlohmann::json jsonl;
    std::string line;
  };
  Logged run(const config::Args& args, int ranks) {
    testing::internal::CaptureStdout();
    run_real(args, ranks);
    const std::string out = testing::internal::GetCapturedStdout();
    Logged l;
    std::smatch m;
    if (std::regex_search(out, m, std::regex(R"( \[[^\]]*\] iteration +1/ +1 \|[^\n]*)"))) l.line = m.str();
    std::ifstream f(out_ / "logging.jsonl");
    for (std::string s; std::getline(f, s);) l.jsonl = nlohmann::json::parse(s);
    return l;
  }
};

// estimator-formulas.md §1d with the model's shape: B sequences of s tokens,
// 12 B s L h^2 [ (1 + g/a + s/h) (a d / h) + (ffn / h) (3/2 for SwiGLU) + V / (2 L h) ].
double megatron_flops(const model::ModelConfig& c, double B, double s) {
  const double L = c.num_layers, h = c.hidden, a = c.heads, g = c.groups, d = c.head_dim;
  const double ffn_gemms = c.swiglu ? 1.5 : 1.0;
  return 12 * B * s * L * h * h *
         ((1 + g / a + s / h) * (a * d / h) + c.ffn / h * ffn_gemms + c.padded_vocab / (2 * L * h));
}

TEST_F(LogThroughput, MegatronsFormulaOverTheLoggedTimeAndTheDryRunsDeviceTime) {
  const config::Args args = parse(pretrain("--log_throughput"), 1);
  const Logged l = run(args, 1);
  ASSERT_FALSE(l.line.empty()) << "no log line for iteration 1";
  const DryRun plan = dry_run(args);  // its whole_model: the shape, the vocabulary padded as the real run pads it
  const double flops = megatron_flops(plan.whole_model, 8, 32);
  const double elapsed_ms = l.jsonl.at("elapsed_time_per_iteration_ms");
  const double tflops = flops / (elapsed_ms / 1000 * 1e12 * 1);
  // Same operations in another order: a few ulps.
  EXPECT_NEAR(l.jsonl.at("throughput_tflops_per_gpu").get<double>(), tflops, 1e-12 * tflops);
  // Megatron's place and format: right after the elapsed time, one decimal.
  EXPECT_NE(l.line.find(fmt::format("| elapsed time per iteration (ms): {:.1f} | throughput per GPU (TFLOP/s/GPU): "
                                    "{:.1f} | simulated device time per iteration (ms): ",
                                    elapsed_ms, tflops)),
            std::string::npos)
      << l.line;

  const StepTime dry = step_time(plan);
  const double simulated_ms = l.jsonl.at("simulated_device_time_per_iteration_ms");
  EXPECT_NEAR(simulated_ms, dry.step_s * 1e3, 1e-12 * dry.step_s * 1e3);  // summation order only
  const double simulated_tflops = flops / (simulated_ms / 1000 * 1e12);
  EXPECT_NEAR(l.jsonl.at("simulated_throughput_tflops_per_gpu").get<double>(), simulated_tflops,
              1e-12 * simulated_tflops);
  EXPECT_NE(l.line.find(fmt::format("| simulated device time per iteration (ms): {:.3f} | simulated throughput per GPU "
                                    "(TFLOP/s/GPU): {:.1f} | learning rate: ",
                                    simulated_ms, simulated_tflops)),
            std::string::npos)
      << l.line;
}

// With a pipeline the line is printed by the last rank: its number is that
// stage's own busy time (its phases, its collectives and its optimizer
// step), not the step.
TEST_F(LogThroughput, WithAPipelineTheLastStagesBusyTime) {
  const config::Args args = parse(pretrain("--log_throughput --pipeline_model_parallel_size 2"), 2);
  const Logged l = run(args, 2);
  const DryRun plan = dry_run(args);
  const StepTime dry = step_time(plan);
  ASSERT_EQ(dry.stages.size(), 2u);
  const double busy_ms = (dry.stages[1].busy_s + dry.stages[1].tail_comm_s + dry.stages[1].optimizer_s) * 1e3;
  EXPECT_NEAR(l.jsonl.at("simulated_device_time_per_iteration_ms").get<double>(), busy_ms, 1e-12 * busy_ms);
  EXPECT_LT(busy_ms, dry.step_s * 1e3) << "the last stage waits for the first (the bubble)";
  const double tflops = megatron_flops(plan.whole_model, 8, 32) /
                        (l.jsonl.at("elapsed_time_per_iteration_ms").get<double>() / 1000 * 1e12 * 2);
  EXPECT_NEAR(l.jsonl.at("throughput_tflops_per_gpu").get<double>(), tflops, 1e-12 * tflops);
}

TEST_F(LogThroughput, OffLeavesTheLineAndTheJsonAsMegatronsDefault) {
  const Logged l = run(parse(pretrain(""), 1), 1);
  ASSERT_FALSE(l.line.empty());
  EXPECT_EQ(l.line.find("throughput"), std::string::npos) << l.line;
  EXPECT_EQ(l.line.find("simulated"), std::string::npos) << l.line;
  EXPECT_NE(l.line.find("| elapsed time per iteration (ms): "), std::string::npos);
  EXPECT_NE(l.line.find(" | learning rate: "), std::string::npos);
  for (const char* key :
       {"throughput_tflops_per_gpu", "simulated_device_time_per_iteration_ms", "simulated_throughput_tflops_per_gpu"})
    EXPECT_FALSE(l.jsonl.contains(key)) << key;
}

}  // namespace
}  // namespace mtrain::plan
