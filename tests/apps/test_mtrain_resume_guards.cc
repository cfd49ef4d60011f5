// Megatron's guard on resume (optimizer_param_scheduler.py, load_state_dict)
// through the real binary: a run saved at iteration 5 of 10 is resumed with
// another schedule. Without a flag the load is refused with Megatron's
// message for every value that differs, before any training (exit 5);
// --override_opt_param_scheduler trains on this run's schedule from the saved
// position (the LR of each iteration is recomputed here from Megatron's
// formula); --use_checkpoint_opt_param_scheduler continues exactly as the
// saved run did, bit for bit, whatever the schedule flags say.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "checkpoint/sharded_checkpoint.h"
#include "common/file_system.h"
#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

constexpr int kGlobalBatch = 8;

// 10 iterations of the demo at lr 3e-4 (cosine to 3e-5 over train_iters,
// warmup 2 iterations), saving at 5 and 10, no evaluation.
std::vector<std::string> job(const fs::path& out, const std::string& extra = "") {
  return concat(concat(words("sft configs/sft_demo.yaml --train_iters 10 --lr 3e-4 --min_lr 3e-5 --lr_warmup_iters 2 "
                             "--micro_batch_size 2 --global_batch_size 8 --log_interval 1 --num_threads 1 "
                             "--num_generate_samples 0 --save_interval 5 --eval_interval 0"),
                       words(extra)),
                {"--output_dir", out.string()});
}

// Megatron's OptimizerParamScheduler.get_lr for the cosine style, in samples,
// written from the Python source (not from mtrain's lr_schedule.cc).
double megatron_cosine_lr(double max_lr, double min_lr, int64_t warmup_iters, int64_t decay_iters, int64_t iters) {
  const double warmup = static_cast<double>(warmup_iters * kGlobalBatch);
  const double decay = static_cast<double>(decay_iters * kGlobalBatch);
  const double steps = static_cast<double>(iters * kGlobalBatch);
  if (warmup > 0 && steps <= warmup) return max_lr * steps / warmup;
  if (steps > decay) return min_lr;
  const double ratio = (steps - warmup) / (decay - warmup);
  return min_lr + 0.5 * (std::cos(std::numbers::pi * ratio) + 1.0) * (max_lr - min_lr);
}

class ResumeGuards : public MtrainTest {
 protected:
  // The straight run, and a directory holding only its iteration 5.
  void SetUp() override {
    MtrainTest::SetUp();
    const RunResult r = run(job(tmp_ / "straight"), "straight");
    ASSERT_EQ(r.exit_code, 0) << r.describe();
  }
  fs::path seeded(const std::string& name) {
    const fs::path to = tmp_ / name;
    fs::create_directories(to);
    fs::copy(tmp_ / "straight" / "iter_0000005", to / "iter_0000005", fs::copy_options::recursive);
    write_text(to / "latest_checkpointed_iteration.txt", "5");
    return to;
  }
  RunResult resume(const std::string& name, const std::string& extra) {
    const fs::path dir = seeded(name);
    return run(concat(job(dir, extra), {"--load", dir.string()}), name);
  }
};

TEST_F(ResumeGuards, AChangedScheduleIsRefusedWithMegatronsMessageBeforeAnyStep) {
  struct Case {
    std::string flags, message;
  };
  const std::vector<Case> cases = {
      {"--train_iters 20", "class input value 160 and checkpoint value 80 for total number of iterations do not match"},
      {"--lr 1e-3", "class input value 0.001 and checkpoint value 0.0003 for learning rate do not match"},
      {"--min_lr 1e-5", "class input value 1e-05 and checkpoint value 3e-05 for minimum learning rate do not match"},
      {"--lr_warmup_iters 3", "class input value 24 and checkpoint value 16 for warmup iterations do not match"},
      {"--lr_decay_style linear",
       "class input value linear and checkpoint value cosine for learning rate decay style do not match"},
      {"--weight_decay 0.01", "class input value 0.01 and checkpoint value 0.1 for start weight decay do not match"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const RunResult r = resume("refused" + std::to_string(i), cases[i].flags);
    EXPECT_EQ(r.exit_code, 5) << cases[i].flags << "\n" << r.describe();
    EXPECT_TRUE(contains(r.err, "OptimizerParamScheduler: " + cases[i].message)) << cases[i].flags << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, "--override_opt_param_scheduler")) << r.err;
    EXPECT_TRUE(contains(r.err, "--use_checkpoint_opt_param_scheduler")) << r.err;
    EXPECT_FALSE(contains(r.out, "] iteration ")) << "trained before refusing:\n" << r.out;
  }
  // --train_iters also moves Megatron's weight-decay horizon (train_iters * global batch).
  const RunResult longer = resume("longer", "--train_iters 20");
  EXPECT_TRUE(contains(longer.err,
                       "class input value 160 and checkpoint value 80 for total number of weight decay "
                       "iterations do not match"))
      << longer.err;
}

TEST_F(ResumeGuards, BothFlagsAreAConfigError) {
  const RunResult r = resume("both", "--override_opt_param_scheduler --use_checkpoint_opt_param_scheduler");
  EXPECT_EQ(r.exit_code, 3) << r.describe();
  EXPECT_TRUE(contains(r.err, "both override and use-checkpoint are set.")) << r.err;
}

TEST_F(ResumeGuards, OverrideTrainsOnTheNewScheduleFromTheSavedPosition) {
  const RunResult r = resume("override", "--train_iters 20 --lr 1e-3 --override-opt-param-scheduler");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, " > overriding total number of iterations value to 160")) << r.out;
  EXPECT_TRUE(contains(r.out, " > overriding learning rate value to 0.001")) << r.out;
  const auto rows = train_rows(tmp_ / "override");
  ASSERT_EQ(rows.size(), 15u) << "iterations 6..20";
  for (const auto& row : rows) {
    const int64_t it = iteration_of(row);
    // The log line of iteration i shows the LR after i successful steps.
    const double want = megatron_cosine_lr(1e-3, 3e-5, 2, 20, it);
    const double got = row.at("learning_rate").get<double>();
    // Both are the same fp64 formula; only the last bits of cos may differ.
    EXPECT_NEAR(got, want, 1e-12 * want) << "iteration " << it;
  }
  EXPECT_EQ(iteration_of(rows.front()), 6);
}

TEST_F(ResumeGuards, UseCheckpointContinuesTheSavedRunBitForBit) {
  const RunResult r =
      resume("kept", "--lr 1e-3 --min_lr 0 --lr_decay_style linear --use_checkpoint_opt_param_scheduler");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, " > using checkpoint value 0.0003 for learning rate")) << r.out;
  EXPECT_TRUE(contains(r.out, " > using checkpoint value cosine for learning rate decay style")) << r.out;
  const auto straight = train_rows(tmp_ / "straight"), kept = train_rows(tmp_ / "kept");
  ASSERT_EQ(straight.size(), 10u);
  ASSERT_EQ(kept.size(), 5u);
  for (size_t i = 0; i < kept.size(); ++i) {
    EXPECT_EQ(kept[i].at("learning_rate"), straight[i + 5].at("learning_rate")) << "iteration " << i + 6;
    EXPECT_EQ(kept[i].at("loss"), straight[i + 5].at("loss")) << "iteration " << i + 6;
  }
  // The next save records the schedule the run used: the checkpoint's.
  PosixFileSystem pfs;
  const auto ckpt = checkpoint::CheckpointReader::open(pfs, (tmp_ / "kept").string());
  const nlohmann::json st = nlohmann::json::parse(ckpt.state_json());
  EXPECT_EQ(ckpt.iteration(), 10);
  EXPECT_EQ(st.at("opt_param_scheduler").at("lr").get<double>(), 3e-4);
  EXPECT_EQ(st.at("opt_param_scheduler").at("lr_decay_style"), "cosine");
}

TEST_F(ResumeGuards, TheSameScheduleResumesAndNoLoadOptimRestartsIt) {
  const RunResult same = resume("same", "");
  ASSERT_EQ(same.exit_code, 0) << same.describe();
  EXPECT_TRUE(contains(same.out, " > using checkpoint value 80 for total number of iterations")) << same.out;
  // Megatron's --no_load_optim does not load the scheduler, so nothing is compared.
  const RunResult fresh = resume("fresh", "--train_iters 20 --no_load_optim");
  EXPECT_EQ(fresh.exit_code, 0) << fresh.describe();
}

// A checkpoint saved before the schedule was recorded (its state has no
// "opt_param_scheduler") cannot be checked: refused unless the run says its
// own schedule wins.
TEST_F(ResumeGuards, ACheckpointWithoutAScheduleRecordNeedsOverride) {
  const fs::path dir = seeded("old");
  const fs::path manifest = dir / "iter_0000005" / "manifest.json";
  nlohmann::json m = nlohmann::json::parse(read_text(manifest));
  ASSERT_TRUE(m.at("state").contains("opt_param_scheduler"));
  m["state"].erase("opt_param_scheduler");
  write_text(manifest, m.dump());
  const RunResult r = run(concat(job(dir), {"--load", dir.string()}), "old");
  EXPECT_EQ(r.exit_code, 5) << r.describe();
  EXPECT_TRUE(contains(r.err, "the checkpoint records no learning-rate schedule")) << r.err;
  EXPECT_TRUE(contains(r.err, "pass --override_opt_param_scheduler")) << r.err;
  const RunResult ok = run(concat(job(dir, "--override_opt_param_scheduler"), {"--load", dir.string()}), "old_ok");
  EXPECT_EQ(ok.exit_code, 0) << ok.describe();
}

}  // namespace
}  // namespace mtrain::functional
