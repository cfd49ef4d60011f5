// --overlap_param_gather for real: two data-parallel ranks (threads of a
// SimWorld, real data and math) with the distributed optimizer train the
// demo model with and without the flag. The overlapped run really defers the
// gather (buckets gathered after iteration i's optimizer step arrive during
// iteration i + 1), and yet every step's loss and grad norm and the
// checkpoints saved mid-run (right after a step whose gather is still in
// flight) and at the end are bit-identical to the blocking gather's.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "plan/dry_run_fixture.h"

namespace mtrain::train {
namespace {

namespace fs = std::filesystem;

// Each step's loss and grad norm, and when the non-blocking all-gathers
// completed: inside iteration i's step (the previous step's gather, waited
// for by the forward) or after it (before a save, at the end of training).
class Watch : public observe::TrainHook {
 public:
  void on_step_begin(int64_t it) override {
    iteration_ = it;
    in_step_ = true;
  }
  void on_step_end(const observe::StepMetrics& m) override {
    steps.emplace_back(m.lm_loss, m.grad_norm);
    in_step_ = false;
  }
  void on_comm(const parallel::CommEvent& e) override {
    if (e.nonblocking && e.op == parallel::CommOp::kAllGather) ++(in_step_ ? in_step : after_step)[iteration_];
  }
  std::vector<std::pair<double, double>> steps;
  std::map<int64_t, int> in_step, after_step;  // iteration -> gathers completed

 private:
  int64_t iteration_ = 0;
  bool in_step_ = false;
};

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Drops the run's command line ("args": the flags and output directory
// differ between the two runs by design) from a manifest.
void drop_args(nlohmann::json& j) {
  if (!j.is_object()) return;
  j.erase("args");
  for (auto& [key, value] : j.items()) drop_args(value);
}

// Every file of a checkpoint directory, by relative path; a manifest without "args".
std::map<std::string, std::string> files_of(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::string bytes = bytes_of(e.path());
    if (e.path().extension() == ".json") {
      nlohmann::json j = nlohmann::json::parse(bytes);
      drop_args(j);
      bytes = j.dump();
    }
    out[fs::relative(e.path(), dir).string()] = bytes;
  }
  return out;
}

class OverlapParamGather : public plan::DryRunTest {
 protected:
  struct Run {
    std::vector<std::shared_ptr<Watch>> watch;
    fs::path out;
  };
  Run train(const std::string& name, const std::string& extra) {
    Run r;
    r.out = out_ / name;
    const config::Args args = plan::parse(
        "sft configs/sft_demo.yaml --train_iters 3 --save_interval 2 --lr_decay_iters 2400 --micro_batch_size 2 "
        "--global_batch_size 8 --eval_interval 0 --num_generate_samples 0 --num_threads 1 "
        "--use_distributed_optimizer --overlap_grad_reduce --ddp_bucket_size 20000 --output_dir " +
            r.out.string() + " " + extra,
        2);
    std::vector<std::shared_ptr<observe::TrainHook>> hooks;
    for (int rank = 0; rank < 2; ++rank) {
      r.watch.push_back(std::make_shared<Watch>());
      hooks.push_back(r.watch.back());
    }
    plan::run_real(args, 2, hooks);
    return r;
  }
};

TEST_F(OverlapParamGather, BitIdenticalToTheBlockingGatherAndSavesWholeWeights) {
  const Run blocking = train("blocking", "");
  const Run overlapped = train("overlapped", "--overlap_param_gather");
  for (int rank = 0; rank < 2; ++rank) {
    const Watch& b = *blocking.watch[rank];
    const Watch& o = *overlapped.watch[rank];
    ASSERT_EQ(b.steps.size(), 3u);
    EXPECT_EQ(o.steps, b.steps) << "rank " << rank << ": loss and grad norm differ";  // bitwise doubles
    EXPECT_TRUE(b.in_step.empty() && b.after_step.empty()) << "the blocking run started no non-blocking gather";
    const auto n = [](const std::map<int64_t, int>& m, int64_t it) { return m.count(it) ? m.at(it) : 0; };
    const std::string who = "rank " + std::to_string(rank);
    EXPECT_GT(n(o.in_step, 2), 0) << who << ": iteration 1's gather arrives in iteration 2's forward";
    EXPECT_GT(n(o.after_step, 2), 0) << who << ": iteration 2's gather is finished before its save";
    EXPECT_EQ(n(o.in_step, 3), 0) << who << ": so iteration 3 waits for none";
    EXPECT_GT(n(o.after_step, 3), 0) << who << ": the last gather is finished when training ends";
    EXPECT_EQ(n(o.in_step, 1) + n(o.after_step, 1), 0) << who;
  }
  int checkpoints = 0;
  for (const auto& e : fs::directory_iterator(blocking.out)) {
    if (!e.is_directory() || e.path().filename().string().rfind("iter_", 0) != 0) continue;
    ++checkpoints;
    const fs::path other = overlapped.out / e.path().filename();
    ASSERT_TRUE(fs::exists(other)) << other;
    const auto want = files_of(e.path()), got = files_of(other);
    ASSERT_EQ(got.size(), want.size()) << e.path().filename();
    for (const auto& [name, bytes] : want) {
      ASSERT_TRUE(got.count(name)) << name;
      EXPECT_TRUE(got.at(name) == bytes) << e.path().filename() / name << " differs";
    }
  }
  EXPECT_EQ(checkpoints, 2) << "iterations 2 (mid-run) and 3 (the end)";
}

}  // namespace
}  // namespace mtrain::train
