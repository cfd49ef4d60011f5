// `mtrain ... --dry_run` end to end: a world set by NNODES / NPROC_PER_NODE is
// planned in this one process (no mpirun: the 4 GiB address-space cap of the
// harness would not even hold a launch), a 7B plan that does not fit ends
// with exit 6 and the stage, category, shortfall and fix; bad input is found
// before anything is simulated; --profile writes the simulated timeline.
#include <map>
#include <nlohmann/json.hpp>

#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

class DryRunCli : public MtrainTest {
 protected:
  std::vector<std::string> demo(const std::string& extra) {
    return concat(words("sft configs/sft_demo.yaml --dry_run " + extra), {"--output_dir", (tmp_ / "out").string()});
  }
  static RunOptions world(int nnodes, int nproc) {
    RunOptions o;
    o.timeout_seconds = 60;
    o.env = {{"NNODES", std::to_string(nnodes)}, {"NPROC_PER_NODE", std::to_string(nproc)}};
    return o;
  }
};

TEST_F(DryRunCli, SevenBillionOnANodeThatDoesNotFitIsExitSix) {
  // Llama-2-7B, DP 8 without the distributed optimizer: 18 bytes per
  // parameter (Megatron's formula) is 113 GiB per device.
  const RunResult r = run(words("pt --model_preset llama2-7b --bf16 --seq_length 4096 --global_batch_size 64 "
                                "--train_iters 1 --lr_warmup_iters 0 --use_distributed_optimizer false --dry_run "
                                "--output_dir " +
                                (tmp_ / "out").string()),
                          "7b", world(1, 8));
  ASSERT_EQ(r.exit_code, 6) << r.describe();
  EXPECT_NE(r.out.find("8 ranks (tensor parallel 1, pipeline parallel 1, data parallel 8)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("stands for ranks 0-7"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("DOES NOT FIT"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("the plan does not fit: pipeline stage 0 (ranks 0-7)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the largest part is optimizer states"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hint: the cheapest change that fits (dry-run checked; the fastest of those that fit): "
                       "--pipeline_model_parallel_size 4 (peak "),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(tmp_ / "out" / "logging.jsonl")) << "a dry run trains nothing";
}

TEST_F(DryRunCli, TwoNodesArePlannedInOneProcess) {
  const RunResult r = run(demo("--tensor_model_parallel_size 2 --pipeline_model_parallel_size 2"), "2n", world(2, 4));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("8 ranks (tensor parallel 2, pipeline parallel 2, data parallel 2)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("pipeline stage 1: simulated rank 4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stands for ranks 4-7"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("The plan FITS on every device."), std::string::npos) << r.out;
}

// torchrun's flags set the planned world like the variables do, and win over them.
TEST_F(DryRunCli, FlagsSetThePlannedWorldOverTheVariables) {
  const std::string layout = "--tensor_model_parallel_size 2 --pipeline_model_parallel_size 2";
  const RunResult vars = run(demo(layout), "vars", world(2, 4));
  ASSERT_EQ(vars.exit_code, 0) << vars.describe();
  RunOptions no_vars;
  no_vars.unset_env = {"NNODES", "NPROC_PER_NODE", "NPUS_PER_NODE"};
  const RunResult flags = run(demo(layout + " --nnodes 2 --nproc_per_node 4"), "flags", no_vars);
  ASSERT_EQ(flags.exit_code, 0) << flags.describe();
  EXPECT_NE(flags.out.find("8 ranks (tensor parallel 2, pipeline parallel 2, data parallel 2)"), std::string::npos)
      << flags.out;
  EXPECT_EQ(flags.out, vars.out);

  const RunResult over = run(demo(layout + " --nproc_per_node 4"), "over", world(2, 2));
  ASSERT_EQ(over.exit_code, 0) << over.describe();
  EXPECT_EQ(over.out, vars.out);
  EXPECT_NE(over.err.find("NPROC_PER_NODE=2 and --nproc_per_node 4 disagree; using --nproc_per_node"),
            std::string::npos)
      << over.err;
}

// `dry_run: true` in the YAML config stops the launch like the flag: the
// launcher reads the config before it decides (a launch would fail here:
// MTRAIN_MPIRUN names no program), and the plan is the flag's, byte for byte.
TEST_F(DryRunCli, YamlDryRunPlansTheWorldLikeTheFlag) {
  RunOptions o = world(1, 4);
  o.env.push_back({"MTRAIN_MPIRUN", (tmp_ / "no_mpirun_here").string()});
  const fs::path job = tmp_ / "job.yaml";
  write_text(job, "include: " + (fs::path(MTRAIN_SOURCE_DIR) / "configs/sft_demo.yaml").string() + "\ndry_run: true\n");
  const RunResult yaml =
      run({"sft", job.string(), "--micro_batch_size", "4", "--output_dir", (tmp_ / "out").string()}, "yaml", o);
  ASSERT_EQ(yaml.exit_code, 0) << yaml.describe();
  EXPECT_NE(yaml.out.find("4 ranks (tensor parallel 1, pipeline parallel 1, data parallel 4)"), std::string::npos)
      << yaml.out;
  const RunResult flag = run(demo("--micro_batch_size 4"), "flag", o);
  ASSERT_EQ(flag.exit_code, 0) << flag.describe();
  EXPECT_EQ(yaml.out, flag.out);

  // A mistake in that YAML is found by the launcher, with its file:line:col.
  write_text(job,
             "include: " + (fs::path(MTRAIN_SOURCE_DIR) / "configs/sft_demo.yaml").string() + "\ndry_run: perhaps\n");
  const RunResult bad = run({"sft", job.string()}, "bad", o);
  EXPECT_EQ(bad.exit_code, 3) << bad.describe();
  EXPECT_NE(bad.err.find(job.string() + ":2:10: invalid value for 'dry_run'"), std::string::npos) << bad.err;
}

TEST_F(DryRunCli, ImpossibleLayoutGetsMegatronsMessage) {
  const RunResult r = run(demo("--tensor_model_parallel_size 4"), "layout", world(1, 6));
  EXPECT_EQ(r.exit_code, 3) << r.describe();
  EXPECT_NE(r.err.find("world size (6) is not divisible by total_model_size (4)"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("Dry run"), std::string::npos) << "nothing is simulated";
}

// One rank per NPU: a node of the profile (Ascend910B3: 8 NPUs) cannot hold
// 16 ranks, so the dry run refuses it as the launch would (exit 8).
TEST_F(DryRunCli, MoreRanksPerNodeThanTheProfileHasNpusIsRefused) {
  const RunResult r = run(demo("--global_batch_size 128"), "crowded", world(1, 16));
  EXPECT_EQ(r.exit_code, 8) << r.describe();
  EXPECT_NE(r.err.find("16 local ranks do not fit: this node has 8 devices (one device per rank)"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("hint: run at most 8 ranks per node"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("Dry run"), std::string::npos) << "nothing is simulated";
  const RunResult two_nodes = run(demo("--global_batch_size 128"), "spread", world(2, 8));
  EXPECT_EQ(two_nodes.exit_code, 0) << two_nodes.describe();
}

TEST_F(DryRunCli, MissingCheckpointIsAnErrorButAMissingDatasetIsFine) {
  const RunResult load = run(demo("--load " + (tmp_ / "no_such_checkpoint").string()), "load");
  EXPECT_EQ(load.exit_code, 5) << load.describe();
  EXPECT_NE(load.err.find("no_such_checkpoint: no checkpoint there"), std::string::npos) << load.err;
  const RunResult data = run(demo("--dataset " + (tmp_ / "not_yet_written.jsonl").string()), "data");
  EXPECT_EQ(data.exit_code, 0) << data.describe();
}

// --profile with --dry_run: the simulated step as a Chrome trace, both
// stages of a PP 2 plan on one screen; each stage's spans follow one another
// on its clock, and stage 1's forward of a micro-batch starts only after
// stage 0's forward of it has ended (the message it waits for).
TEST_F(DryRunCli, ProfileWritesTheSimulatedTimeline) {
  const fs::path dir = tmp_ / "prof";
  const RunResult r = run(demo("--pipeline_model_parallel_size 2 --profile --profile_save_path " + dir.string()),
                          "profile", world(1, 2));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("Simulated timeline (Chrome trace): " + (dir / "simulated_trace.json").string()),
            std::string::npos)
      << r.out;
  const nlohmann::json doc = nlohmann::json::parse(read_text(dir / "simulated_trace.json"));
  std::map<std::pair<int, std::string>, std::pair<double, double>> span;  // (stage, name) -> (begin, end)
  std::map<int, double> stage_clock;
  int rows = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") ++rows;
    if (e["ph"] != "X") continue;
    const int stage = e["tid"];
    const double b = e["ts"], d = e["dur"];
    EXPECT_GE(b + 1e-9, stage_clock[stage]) << "stage " << stage << " runs two spans at once";
    stage_clock[stage] = b + d;
    span[{stage, e["name"]}] = {b, b + d};
  }
  EXPECT_EQ(rows, 2);
  ASSERT_TRUE(span.count({0, "forward mb 0"}) && span.count({1, "forward mb 0"})) << doc.dump();
  const auto at = [&](int stage, const char* name) { return span[std::make_pair(stage, std::string(name))]; };
  EXPECT_GT(at(1, "forward mb 0").first, at(0, "forward mb 0").second);
  EXPECT_GT(at(0, "backward mb 0").first, at(1, "backward mb 0").second);
}

TEST_F(DryRunCli, RealRunProfilerChoicesAreRefusedNotIgnored) {
  const RunResult r = run(demo("--profile --profile_ranks 0"), "profile_ranks");
  EXPECT_EQ(r.exit_code, 3) << r.describe();
  EXPECT_NE(r.err.find("--profile_ranks with --dry_run"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace mtrain::functional
