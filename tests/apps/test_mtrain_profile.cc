// --profile through the binary: a 2-rank pipeline (PP=2) run writes each
// rank's trace and the merged trace with both ranks' forward and backward
// steps (the pipeline bubble shows between them); bad profiling flags stop
// the run with exit 3 before training.
#include <nlohmann/json.hpp>

#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

using Profile = MtrainTest;

std::vector<std::string> profile_job(const fs::path& out, const std::string& extra) {
  return checkpoint_job(out, "--train_iters 4 --save_interval 100 " + extra);
}

TEST_F(Profile, PipelineRanksAreMergedIntoOneTrace) {
  const fs::path out = tmp_ / "out", prof = tmp_ / "prof";
  const RunResult r = run(concat(profile_job(out,
                                             "--pipeline_model_parallel_size 2 --profile --profile_step_start 2 "
                                             "--profile_step_end 4 --profile_with_cpu"),
                                 {"--profile_save_path", prof.string()}),
                          "pp2", launch_ranks(2));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "[profiler] recording iterations 3..4")) << r.out;
  EXPECT_TRUE(contains(r.out, "[rank 1] profile of rank 1, iterations 3..4")) << r.out;
  for (int rank : {0, 1}) {
    EXPECT_TRUE(fs::exists(prof / ("rank_" + std::to_string(rank) + "_trace.json"))) << rank;
    EXPECT_TRUE(fs::exists(prof / ("rank_" + std::to_string(rank) + "_summary.txt"))) << rank;
  }
  const nlohmann::json merged = nlohmann::json::parse(read_text(prof / "merged_trace.json"));
  std::map<int, int> fwd, bwd, p2p;
  std::map<int, std::string> names;
  for (const auto& e : merged["traceEvents"]) {
    const int pid = e["pid"];
    if (e["ph"] == "M" && e["name"] == "process_name") names[pid] = e["args"]["name"];
    if (e["ph"] != "X" || e["tid"] != 1) continue;  // the host track
    const int64_t it = e["args"]["iteration"];
    EXPECT_TRUE(it == 3 || it == 4) << e.dump();
    fwd[pid] += e["name"] == "forward_step";
    bwd[pid] += e["name"] == "backward_step";
    p2p[pid] += e["cat"] == "comm" && e["args"]["group"] == "pp";
  }
  // 2 iterations x 4 micro-batches on each stage.
  EXPECT_EQ(fwd, (std::map<int, int>{{0, 8}, {1, 8}}));
  EXPECT_EQ(bwd, (std::map<int, int>{{0, 8}, {1, 8}}));
  EXPECT_GT(p2p[0], 0);
  EXPECT_GT(p2p[1], 0);
  EXPECT_TRUE(contains(names[0], "rank 0 (tp 0, pp 0")) << names[0];
  EXPECT_TRUE(contains(names[1], "rank 1 (tp 0, pp 1")) << names[1];
}

// A profile that cannot be written costs the profile, not the run.
TEST_F(Profile, AnUnwritableSavePathWarnsAndTrainingGoesOn) {
  const fs::path blocker = tmp_ / "not_a_dir";
  write_text(blocker, "a file where the profile directory should be");
  const RunResult r = run(concat(profile_job(tmp_ / "out", "--profile --profile_step_start 1 --profile_step_end 2"),
                                 {"--profile_save_path", (blocker / "prof").string()}),
                          "blocked");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(contains(r.err, "warning: profiler: rank 0 could not write its trace")) << r.err;
  EXPECT_TRUE(contains(r.out, "iteration        4/       4")) << r.out;
}

TEST_F(Profile, BadFlagsExitThree) {
  struct Case {
    std::string extra, message;
  };
  for (const Case& c :
       {Case{"--profile --profile_step_start 0", "profile_step_start should be greater than 0 but now it is 0"},
        Case{"--profile --profile_step_start 3 --profile_step_end 2",
             "--profile_step_end (2) must be greater than --profile_step_start (3)"},
        Case{"--profile --profile_ranks 1", "--profile_ranks 1: no such rank in a world of 1 rank"},
        Case{"--profile-with-memory", "--profile_with_memory needs --profile"}}) {
    const RunResult r = run(profile_job(tmp_ / "bad", c.extra), "bad");
    EXPECT_EQ(r.exit_code, 3) << c.extra << "\n" << r.describe();
    EXPECT_TRUE(contains(r.err + r.out, c.message)) << c.extra << "\n" << r.describe();
  }
}

}  // namespace
}  // namespace mtrain::functional
