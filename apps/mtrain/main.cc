// mtrain: the command-line entry point.
//
// 1. Launch: with NPROC_PER_NODE (NPUS_PER_NODE) > 1 or NNODES set (or the
//    flags --nproc_per_node / --nnodes, read with the YAML config before the
//    decision), not a --dry_run and not already a rank, mtrain re-runs itself
//    under mpirun and propagates its exit code (launch_run.h; docs/LAUNCH.md).
// 2. Otherwise this process does the work, as the only process or as one rank
//    (under mpirun: MPI is initialised and, for a multi-node launch, the nodes
//    are joined into one world, rendezvous.h). Checks every rank makes alike are
//    agreed across ranks and printed once (launch_rank.h); then the command runs.
// Every mtrain::Error becomes its message, a hint and the exit code of its
// class (README "Exit codes"); an error every rank hits alike at run time is
// printed once, others by their rank (launch_rank.h).
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/errors.h"
#include "common/progress.h"
#include "config/cli.h"
#include "mtrain/commands.h"
#include "mtrain/launch/launch_devices_command.h"
#include "mtrain/launch/launch_env.h"
#include "mtrain/launch/launch_rank.h"
#include "mtrain/launch/launch_relay.h"
#include "mtrain/launch/launch_run.h"
#include "mtrain/launch/rendezvous.h"
#include "parallel/mpi_comm.h"
#include "plan/dry_run.h"
#include "plan/dry_run_command.h"
#include "plan/memory_report.h"
#include "tensor/tensor.h"
#include "train/rank_build.h"
#include "train/run.h"

namespace {

using mtrain::launch::WorldInfo;

// sft and pt, then the table's commands (commands.h) with their arguments passed through.
std::vector<mtrain::config::CommandSpec> mtrain_commands() {
  auto commands = mtrain::config::default_commands();
  for (const mtrain::app::Subcommand& c : mtrain::app::subcommands())
    commands.push_back({c.name, {}, c.description, /*training_flags=*/false});
  return commands;
}

// What the agreed checks produced: the parsed command and this rank's device.
struct Prepared {
  mtrain::config::Invocation inv;
  const mtrain::app::Subcommand* command = nullptr;  // null: a training command (or help / version)
  mtrain::app::ParsedCommand parsed;                 // the table command's options
  mtrain::launch::DevicePlacement placement;
  std::vector<std::string> warnings;
};

// Commands that work on files alone (export, preprocess_data) refuse a launch of several ranks.
void require_one_process(const char* command, const WorldInfo& world) {
  if (world.size > 1)
    throw mtrain::UsageError(fmt::format("mtrain {} runs as one process, not {} ranks", command, world.size),
                             "run it without NPROC_PER_NODE / NNODES / mpirun");
}

// The launch a command line asks for: NNODES / NPROC_PER_NODE with --nnodes /
// --nproc_per_node over them, and whether it is a dry run. Read from the
// merged command line and YAML config before any rank exists (config::peek_args),
// so `dry_run: true` in a YAML file stops the launch like the flag does.
struct LaunchChoice {
  mtrain::launch::LaunchRequest request;
  bool dry_run = false;
  bool flags = false;     // --nnodes or --nproc_per_node given
  bool progress = false;  // a training run that wants its progress line (--progress)
};

LaunchChoice read_launch_choice(int argc, char** argv, const mtrain::launch::Env& env) {
  LaunchChoice c;
  c.request = mtrain::launch::read_launch_request(env);
  mtrain::config::ParseOptions options;
  options.commands = mtrain_commands();
  const std::optional<mtrain::config::Args> args = mtrain::config::peek_args(argc, argv, options);
  if (!args) return c;
  mtrain::launch::apply_launch_flags(c.request, args->nnodes, args->nproc_per_node);
  c.dry_run = args->dry_run;
  c.flags = args->nnodes || args->nproc_per_node;
  c.progress = args->progress && !args->dry_run;
  return c;
}

// Commands whose long work shows a progress line: training (unless
// --progress false) and the table's commands that say so (commands.cc).
bool wants_progress(const LaunchChoice& launch, const std::vector<std::string>& args) {
  if (launch.progress) return true;
  const mtrain::app::Subcommand* command = args.empty() ? nullptr : mtrain::app::find_subcommand(args[0]);
  if (!command || !command->shows_progress) return false;
  for (const auto& a : args)
    if (a == "-h" || a == "--help") return false;
  return true;
}

// The world a command line is validated for: this launch's, or for a dry run
// outside mpirun the one the launch choice would start (planned, not launched).
// Under mpirun, --nnodes x --nproc_per_node must be the world mpirun started.
int validated_world_size(const LaunchChoice& launch, const mtrain::launch::Env& env, const WorldInfo& world) {
  if (mtrain::launch::under_mpi(env)) {
    if (launch.flags && launch.request.world_size() != world.size)
      throw mtrain::UsageError(
          fmt::format("--nnodes {} x --nproc_per_node {} is {} ranks, but mpirun started {}", launch.request.nnodes,
                      launch.request.nproc_per_node, launch.request.world_size(), world.size),
          "under mpirun the world is mpirun's: drop --nnodes / --nproc_per_node or make them "
          "agree with -np");
    return world.size;
  }
  return launch.dry_run ? launch.request.world_size() : world.size;
}

// A real run checks its budget first, shape-only (the dry run's numbers,
// in well under a second): a plan that does not fit the simulated NPUs, or
// whose fp32 tensors this machine's RAM cannot hold for its ranks, is
// refused before any host memory is allocated. A job the dry run cannot
// size (no vocabulary known before the data is read) is left to the run.
static void preflight(const mtrain::config::Args& given, const WorldInfo& world) {
  mtrain::config::Args args = given;
  // --num_train_epochs: the length comes from the data; the budget is one step's.
  if (!args.train_iters) args.train_iters = 1;
  if (!args.lr_decay_iters) args.lr_decay_iters = *args.train_iters;
  std::optional<mtrain::plan::DryRun> budget;
  try {
    budget = mtrain::plan::dry_run(args, mtrain::plan::DryRunData::kShapes);  // the slots are for --max_length
  } catch (const mtrain::ConfigError&) {
    return;
  }
  mtrain::plan::require_fit(*budget, args);
  std::vector<int> local;
  for (int i = 0; i < world.local_size; ++i) local.push_back(world.rank - world.local_rank + i);
  mtrain::plan::require_host_fit(*budget, local, mtrain::host_available_bytes());
}

Prepared prepare(int argc, char** argv, const mtrain::launch::Env& env, const WorldInfo& world) {
  Prepared p;
  mtrain::config::ParseOptions options;
  options.commands = mtrain_commands();
  options.help_width = mtrain::config::stdout_help_width();
  const LaunchChoice launch = read_launch_choice(argc, argv, env);
  options.world_size = validated_world_size(launch, env, world);
  p.inv = mtrain::config::parse_command_line(argc, argv, options);
  p.warnings = p.inv.warnings;
  if (launch.dry_run && !mtrain::launch::under_mpi(env))  // a launch would have printed them
    p.warnings.insert(p.warnings.end(), launch.request.warnings.begin(), launch.request.warnings.end());
  if (p.inv.action != mtrain::config::Invocation::Action::kRun) return p;
  p.command = mtrain::app::find_subcommand(p.inv.command);
  if (p.command) {
    p.parsed = p.command->parse(p.inv.passthrough, {env, world, &p.placement, &p.warnings});
    if (p.command->single_process && !p.parsed.help) require_one_process(p.command->name.c_str(), world);
    return p;
  }
  const std::string profile = p.inv.args.device_profile;
  // A dry run places the node it plans (its ranks on this node's NPUs), so a
  // world the profile's node cannot hold is refused as a launch would be.
  WorldInfo placed = world;
  if (launch.dry_run && !mtrain::launch::under_mpi(env)) {
    placed.size = launch.request.world_size();
    placed.nnodes = launch.request.nnodes;
    placed.local_size = launch.request.nproc_per_node;
  }
  p.placement = mtrain::launch::place_device(profile, env, placed, &p.warnings);
  if (!p.inv.args.dry_run) preflight(p.inv.args, world);  // every rank alike: agreed on, reported once
  return p;
}

// A table command, else the default path: the dry run or the training run.
int run_command(const Prepared& p, const WorldInfo& world, mtrain::launch::MpiWorld* mpi,
                const mtrain::launch::Env& env) {
  if (p.command) return p.command->run(p.parsed.options, {env, world, mpi, p.placement});
  if (p.inv.args.dry_run) {
    if (world.size > 1)
      throw mtrain::UsageError(
          fmt::format("--dry_run plans the whole world in one process, not in {} ranks", world.size),
          "run the dry run without mpirun; --nnodes / --nproc_per_node (or NNODES / NPROC_PER_NODE) set "
          "the planned world");
    return mtrain::plan::run_dry_run(p.inv.args, std::cout);
  }
  mtrain::train::RunContext ctx;
  ctx.device_index = p.placement.device;
  ctx.local_ranks = world.local_size;
  ctx.node = world.node;
  ctx.affinity_mode = p.placement.affinity_mode;
  ctx.affinity = p.placement.affinity;
  ctx.progress = mtrain::stdout_progress_sink();
  if (!mpi) return mtrain::train::run_training(p.inv.args, ctx);
  // The rank's communicators live only as long as the run: they must be gone
  // before MPI is finalised (a cross-node communicator alive at MPI_Finalize hangs).
  mtrain::parallel::ParallelState state =
      mtrain::parallel::make_mpi_parallel_state(mtrain::train::process_grid_from_args(p.inv.args), mpi->comm());
  ctx.parallel = &state;
  return mtrain::train::run_training(p.inv.args, ctx);
}

// This process does the work: alone, or as one rank of a launch.
int run_here(int argc, char** argv, const mtrain::launch::Env& env) {
  std::unique_ptr<mtrain::launch::MpiWorld> mpi;
  if (mtrain::launch::under_mpi(env)) mpi = std::make_unique<mtrain::launch::MpiWorld>(&argc, &argv, env);
  const WorldInfo world = mpi ? mpi->info() : WorldInfo{};

  Prepared p;
  std::exception_ptr error;
  try {
    p = prepare(argc, argv, env, world);
  } catch (...) {
    error = std::current_exception();
  }
  if (const int rc = mtrain::launch::agree_on_failure(mpi.get(), world, error); rc != 0) {
    if (mpi) mpi->finalize();
    return rc;
  }
  if (world.rank == 0) {
    for (const std::string& w : p.warnings) fmt::print(stderr, "mtrain: warning: {}\n", w);
    if (p.inv.action != mtrain::config::Invocation::Action::kRun) fmt::print("{}", p.inv.text);
    if (p.parsed.help) fmt::print("{}", p.command->help());
  }
  int rc = 0;
  if (p.inv.action == mtrain::config::Invocation::Action::kRun && !p.parsed.help) {
    std::optional<mtrain::launch::FailureChannel> failures;
    if (mpi && world.size > 1) failures.emplace(mpi->comm());
    try {
      rc = run_command(p, world, mpi.get(), env);
    } catch (...) {
      error = std::current_exception();
      rc = mtrain::launch::exit_code_of(error);
      if (!failures) {
        mtrain::launch::print_error(error, world, false);
      } else if (!mtrain::launch::report_command_failure(*failures, world, error)) {
        mpi->abort(rc);  // the others may be waiting in a collective
      }
    }
  }
  if (mpi) mpi->finalize();
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  const mtrain::launch::Env env = mtrain::launch::Env::from_process();
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (!mtrain::launch::under_mpi(env)) {
      const LaunchChoice launch = read_launch_choice(argc, argv, env);
      if (mtrain::launch::wants_relaunch(launch.request, env, args, launch.dry_run))
        return mtrain::launch::run_launch(launch.request, env, args, launch.progress);
      // One process on a terminal: it runs again under this one, which draws its progress line.
      if (wants_progress(launch, args) && mtrain::launch::stdout_wants_progress_relay(env))
        return mtrain::launch::run_relayed_self(args);
    }
  } catch (...) {
    const std::exception_ptr error = std::current_exception();
    mtrain::launch::print_error(error, WorldInfo{}, false);
    return mtrain::launch::exit_code_of(error);
  }
  return run_here(argc, argv, env);
}
