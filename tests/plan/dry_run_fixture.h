// The test fixture of the dry-run tests: command lines parsed as `mtrain`
// would for a world of N ranks, run from the repository (the demo config
// names files relative to it), with a temporary output directory.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "config/cli.h"
#include "parallel/sim_comm.h"
#include "train/rank_build.h"
#include "train/run.h"

namespace mtrain::plan {

// Parses `flags` like the command line of `mtrain sft` for a world of `world` ranks.
inline config::Args parse(const std::string& flags, int world) {
  std::vector<std::string> words{"mtrain"};
  std::string w;
  for (char c : flags + " ") {
    if (c != ' ') {
      w += c;
    } else if (!w.empty()) {
      words.push_back(w);
      w.clear();
    }
  }
  std::vector<const char*> argv;
  for (const auto& s : words) argv.push_back(s.c_str());
  config::ParseOptions o;
  o.world_size = world;
  return config::parse_command_line(static_cast<int>(argv.size()), argv.data(), o).args;
}

// The real run of `args` on `ranks` ranks, each a thread of a SimWorld with
// real data and math: each rank's device accounting at the end. hooks[rank],
// when given, joins that rank's step hooks.
inline std::vector<device::MemoryStats> run_real(const config::Args& args, int ranks,
                                                 const std::vector<std::shared_ptr<observe::TrainHook>>& hooks = {}) {
  std::vector<device::MemoryStats> real(ranks);
  parallel::SimWorld world(ranks);
  const parallel::ProcessGrid grid = train::process_grid_from_args(args);
  world.run([&](int rank) {
    parallel::ParallelState state = parallel::make_sim_parallel_state(grid, world, rank);
    train::RunContext ctx;
    ctx.parallel = &state;
    ctx.device_index = rank;
    ctx.local_ranks = ranks;
    ctx.memory_out = &real[rank];
    if (!hooks.empty()) ctx.hooks.push_back(hooks[rank]);
    train::run_training(args, ctx);
  });
  return real;
}

class DryRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    old_cwd_ = std::filesystem::current_path();
    std::filesystem::current_path(MTRAIN_SOURCE_DIR);  // the demo config names files relative to the repository
    out_ = std::filesystem::temp_directory_path() / ("mtrain_dry_run_" + std::to_string(getpid()));
  }
  void TearDown() override {
    std::filesystem::current_path(old_cwd_);
    std::filesystem::remove_all(out_);
  }
  // The demo SFT job, 2 iterations, no evaluation or sample answers.
  std::string demo(const std::string& extra) const {
    return "sft configs/sft_demo.yaml --train_iters 2 --lr_decay_iters 2400 --micro_batch_size 2 --global_batch_size 8 "
           "--eval_interval 0 --num_generate_samples 0 --num_threads 1 --output_dir " +
           out_.string() + " " + extra;
  }
  std::filesystem::path old_cwd_, out_;
};

}  // namespace mtrain::plan
