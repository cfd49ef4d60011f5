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
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/errors.h"
#include "common/progress.h"
#include "config/cli.h"
#include "data/preprocess_command.h"
#include "data/tokenizer_command.h"
#include "mtrain/launch/launch_devices_command.h"
#include "mtrain/launch/launch_env.h"
#include "mtrain/launch/launch_npu_smi_command.h"
#include "mtrain/launch/launch_rank.h"
#include "mtrain/launch/launch_relay.h"
#include "mtrain/launch/launch_run.h"
#include "mtrain/launch/rendezvous.h"
#include "observe/precision_compare.h"
#include "parallel/mpi_comm.h"
#include "plan/dry_run_command.h"
#include "plan/plan_command.h"
#include "report/report.h"
#include "train/export.h"
#include "train/infer.h"
#include "train/run.h"

namespace {

using mtrain::launch::WorldInfo;

std::vector<mtrain::config::CommandSpec> mtrain_commands() {
  auto commands = mtrain::config::default_commands();
  commands.push_back({"devices",
                      {},
                      "show the simulated NPU pool and which rank owns which device (like npu-smi)",
                      /*training_flags=*/false});
  commands.push_back({"npu-smi",
                      {},
                      "`npu-smi info [-t topo]`: the node's simulated NPUs, their HBM use and mtrain processes",
                      /*training_flags=*/false});
  commands.push_back({"export",
                      {},
                      "convert weights: mtrain checkpoint -> Hugging Face directory (--to_hf) or back (--to_mcore)",
                      /*training_flags=*/false});
  commands.push_back({"infer",
                      {},
                      "answer with a trained model (swift infer): chat on stdin, or a dataset into JSONL; KV cache",
                      /*training_flags=*/false});
  commands.push_back({"tokenizer",
                      {},
                      "encode or decode with a tokenizer (tokenizer.json, tokenizer.model) to check ids",
                      /*training_flags=*/false});
  commands.push_back({"compare",
                      {},
                      "compare two precision dumps (--precision_dump_path) and name the first diverging module",
                      /*training_flags=*/false});
  commands.push_back({"plan",
                      {},
                      "search TP/PP/VPP/DP, micro-batch, recompute, distributed optimizer and SP for the fastest "
                      "layout that fits (dry-run checked)",
                      /*training_flags=*/false});
  commands.push_back(
      {"report",
       {},
       "write a run's HTML report with SVG plots (loss, lr, grad norm, memory...); --compare overlays runs",
       /*training_flags=*/false});
  commands.push_back({"preprocess_data",
                      {},
                      "tokenize JSONL into Megatron's indexed .bin/.idx pretraining format (for pt --data_path)",
                      /*training_flags=*/false});
  return commands;
}

// What the agreed checks produced: the parsed command and this rank's device.
struct Prepared {
  mtrain::config::Invocation inv;
  mtrain::launch::DevicesOptions devices;
  mtrain::launch::NpuSmiOptions npu_smi;
  mtrain::train::ExportOptions export_options;
  mtrain::train::InferOptions infer_options;
  mtrain::data::TokenizerCommandOptions tokenizer_options;
  mtrain::data::PreprocessCommandOptions preprocess_options;
  mtrain::observe::CompareOptions compare_options;
  mtrain::launch::DevicePlacement placement;
  mtrain::plan::PlanOptions plan_options;
  mtrain::report::ReportOptions report_options;
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
// --progress false), preprocess_data, plan's layout search, export.
bool wants_progress(const LaunchChoice& launch, const std::vector<std::string>& args) {
  if (launch.progress) return true;
  static const std::set<std::string> kCommands = {"preprocess_data", "plan", "export"};
  if (args.empty() || !kCommands.count(args[0])) return false;
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

Prepared prepare(int argc, char** argv, const mtrain::launch::Env& env, const WorldInfo& world) {
  Prepared p;
  mtrain::config::ParseOptions options;
  options.commands = mtrain_commands();
  const LaunchChoice launch = read_launch_choice(argc, argv, env);
  options.world_size = validated_world_size(launch, env, world);
  p.inv = mtrain::config::parse_command_line(argc, argv, options);
  p.warnings = p.inv.warnings;
  if (launch.dry_run && !mtrain::launch::under_mpi(env))  // a launch would have printed them
    p.warnings.insert(p.warnings.end(), launch.request.warnings.begin(), launch.request.warnings.end());
  if (p.inv.action != mtrain::config::Invocation::Action::kRun) return p;
  if (p.inv.command == "export") {  // one process, no device
    p.export_options = mtrain::train::parse_export_args(p.inv.passthrough);
    if (!p.export_options.help) require_one_process("export", world);
    return p;
  }
  if (p.inv.command == "npu-smi") {  // one process, reads the ranks' published status
    p.npu_smi = mtrain::launch::parse_npu_smi_args(p.inv.passthrough);
    if (!p.npu_smi.help) require_one_process("npu-smi", world);
    return p;
  }
  if (p.inv.command == "tokenizer") {  // one process, no device
    p.tokenizer_options = mtrain::data::parse_tokenizer_args(p.inv.passthrough);
    return p;
  }
  if (p.inv.command == "compare") {  // one process, no device
    p.compare_options = mtrain::observe::parse_compare_args(p.inv.passthrough);
    if (!p.compare_options.help) require_one_process("compare", world);
    return p;
  }
  if (p.inv.command == "plan") {  // one process plans the whole world
    // NNODES / NPROC_PER_NODE, as for --dry_run, unless --nnodes / --nproc_per_node say otherwise.
    const mtrain::launch::LaunchRequest request = mtrain::launch::read_launch_request(env);
    p.plan_options = mtrain::plan::parse_plan_args(p.inv.passthrough, request.nnodes, request.nproc_per_node);
    if (!p.plan_options.help) require_one_process("plan", world);
    return p;
  }
  if (p.inv.command == "report") {  // one process, reads files
    p.report_options = mtrain::report::parse_report_args(p.inv.passthrough);
    if (!p.report_options.help) require_one_process("report", world);
    return p;
  }
  if (p.inv.command == "preprocess_data") {  // one process, no device
    p.preprocess_options = mtrain::data::parse_preprocess_args(p.inv.passthrough);
    if (!p.preprocess_options.help) require_one_process("preprocess_data", world);
    return p;
  }
  if (p.inv.command == "infer") {  // one model replica over the launch's ranks, each on its NPU
    p.infer_options = mtrain::train::parse_infer_args(p.inv.passthrough);
    if (p.infer_options.help) return p;
    p.placement =
        mtrain::launch::place_device(p.infer_options.device_profile.value_or("Ascend910B3"), env, world, &p.warnings);
    return p;
  }
  const bool devices = p.inv.command == "devices";
  if (devices) {
    p.devices = mtrain::launch::parse_devices_args(p.inv.passthrough);
    if (p.devices.help) return p;
  }
  const std::string profile = devices ? p.devices.device_profile : p.inv.args.device_profile;
  // A dry run places the node it plans (its ranks on this node's NPUs), so a
  // world the profile's node cannot hold is refused as a launch would be.
  WorldInfo placed = world;
  if (launch.dry_run && !mtrain::launch::under_mpi(env)) {
    placed.size = launch.request.world_size();
    placed.nnodes = launch.request.nnodes;
    placed.local_size = launch.request.nproc_per_node;
  }
  p.placement = mtrain::launch::place_device(profile, env, placed, &p.warnings);
  return p;
}

// `mtrain infer`: the ranks of the launch hold one model (TP x PP).
int run_infer_command(const Prepared& p, const WorldInfo& world, mtrain::launch::MpiWorld* mpi) {
  mtrain::train::InferContext ctx;
  ctx.device_index = p.placement.device;
  ctx.local_ranks = world.local_size;
  ctx.stdout_is_tty = isatty(STDOUT_FILENO) != 0;
  if (!mpi) return mtrain::train::run_infer(p.infer_options, ctx, std::cin, std::cout);
  mtrain::parallel::ProcessGridConfig g;
  g.world_size = world.size;
  g.tensor_model_parallel_size = p.infer_options.tensor_model_parallel_size;
  g.pipeline_model_parallel_size = p.infer_options.pipeline_model_parallel_size;
  mtrain::parallel::ParallelState state =
      mtrain::parallel::make_mpi_parallel_state(mtrain::parallel::ProcessGrid(g), mpi->comm());
  ctx.parallel = &state;
  return mtrain::train::run_infer(p.infer_options, ctx, std::cin, std::cout);
}

int run_command(const Prepared& p, const WorldInfo& world, mtrain::launch::MpiWorld* mpi,
                const mtrain::launch::Env& env) {
  if (p.inv.command == "npu-smi") return mtrain::launch::run_npu_smi_command(p.npu_smi, env, std::cout);
  if (p.inv.command == "devices") {
    return mtrain::launch::run_devices_command(p.devices, p.placement, world, mpi ? mpi->comm() : MPI_COMM_NULL);
  }
  if (p.inv.command == "tokenizer") return mtrain::data::run_tokenizer_command(p.tokenizer_options, std::cout);
  if (p.inv.command == "preprocess_data") return mtrain::data::run_preprocess_command(p.preprocess_options, std::cout);
  if (p.inv.command == "plan") return mtrain::plan::run_plan_command(p.plan_options, std::cout);
  if (p.inv.command == "compare") return mtrain::observe::run_compare(p.compare_options, std::cout);
  if (p.inv.command == "report") return mtrain::report::run_report_command(p.report_options, std::cout);
  if (p.inv.command == "export") {
    mtrain::PosixFileSystem fs;
    return mtrain::train::run_export(p.export_options, fs);
  }
  if (p.inv.command == "infer") return run_infer_command(p, world, mpi);
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
    if (p.devices.help) fmt::print("{}", mtrain::launch::devices_help());
    if (p.npu_smi.help) fmt::print("{}", mtrain::launch::npu_smi_help());
    if (p.export_options.help) fmt::print("{}", mtrain::train::export_help());
    if (p.infer_options.help) fmt::print("{}", mtrain::train::infer_help());
    if (p.tokenizer_options.help) fmt::print("{}", mtrain::data::tokenizer_help());
    if (p.preprocess_options.help) fmt::print("{}", mtrain::data::preprocess_help());
    if (p.compare_options.help) fmt::print("{}", mtrain::observe::compare_help());
    if (p.plan_options.help) fmt::print("{}", mtrain::plan::plan_help());
    if (p.report_options.help) fmt::print("{}", mtrain::report::report_help());
  }
  int rc = 0;
  const bool help = p.devices.help || p.npu_smi.help || p.export_options.help || p.infer_options.help ||
                    p.tokenizer_options.help || p.preprocess_options.help || p.compare_options.help ||
                    p.plan_options.help || p.report_options.help;
  if (p.inv.action == mtrain::config::Invocation::Action::kRun && !help) {
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
