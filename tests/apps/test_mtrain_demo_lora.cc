// configs/sft_demo_lora.yaml, the LoRA variant of the demo, learns on top of
// a base trained by configs/sft_demo.yaml (here 200 of its 2400 iterations,
// to keep the test short) and answers the demo prompts.
//
// "Learns": the held-out loss after the LoRA run is at least 5% below the
// base's. The base alone gains nothing by being evaluated again, so the drop
// is the adapters' work; 5% is about half of what this schedule gains here,
// and a broken adapter path (no update, wrong scale) leaves the base's loss.
#include <gtest/gtest.h>

#include <string>

#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

class DemoLora : public MtrainTest {};

double final_eval(const fs::path& dir) {
  for (auto& j : read_jsonl(dir / "logging.jsonl"))
    if (j.value("end_of_training", false) && j.contains("eval_loss")) return j.at("eval_loss").get<double>();
  return -1;
}

TEST_F(DemoLora, LearnsOnTopOfTheDemoModelAndAnswers) {
  RunOptions o;
  o.timeout_seconds = 1200;  // a hang guard for a busy machine, not a timing assertion
  const std::string base = (tmp_ / "base").string();
  const RunResult b =
      run({"sft", "configs/sft_demo.yaml", "--train_iters", "200", "--save_interval", "200", "--eval_interval", "200",
           "--num_generate_samples", "0", "--num_threads", "1", "--output_dir", base},
          "base", o);
  ASSERT_EQ(b.exit_code, 0) << b.describe();
  const RunResult l = run({"sft", "configs/sft_demo_lora.yaml", "--load", base, "--num_threads", "1", "--output_dir",
                           (tmp_ / "lora").string()},
                          "lora", o);
  ASSERT_EQ(l.exit_code, 0) << l.describe();
  const double before = final_eval(tmp_ / "base"), after = final_eval(tmp_ / "lora");
  ASSERT_GT(before, 0) << b.out;
  ASSERT_GT(after, 0) << l.out;
  EXPECT_LT(after, 0.95 * before) << "held-out loss " << before << " (base) -> " << after << " (LoRA)";
  // The demo's generation step: three prompts, each with an answer.
  const size_t header = l.out.find("What the trained model answers (greedy decoding):");
  ASSERT_NE(header, std::string::npos) << l.out;
  size_t answers = 0;
  for (size_t at = l.out.find("  mtrain:    ", header); at != std::string::npos;
       at = l.out.find("  mtrain:    ", at + 1)) {
    ++answers;
    EXPECT_NE(l.out[at + 13], '\n') << "an empty answer";
  }
  EXPECT_EQ(answers, 3u) << l.out.substr(header);
}

}  // namespace
}  // namespace mtrain::functional
