// The table of subcommands with their own parser (commands.h), in `mtrain --help` order.
#include "mtrain/commands.h"

#include <unistd.h>

#include <iostream>
#include <utility>

#include "calibrate/calibrate_command.h"
#include "common/file_system.h"
#include "data/preprocess_command.h"
#include "data/tokenizer_command.h"
#include "export/export.h"
#include "infer/infer.h"
#include "mtrain/launch/launch_devices_command.h"
#include "mtrain/launch/launch_npu_smi_command.h"
#include "observe/precision_compare.h"
#include "parallel/mpi_comm.h"
#include "plan/plan_command.h"
#include "report/report.h"

namespace mtrain::app {

namespace {

enum class Processes { kAny, kOne };
enum class Progress { kNone, kShown };

// One entry from a parser returning the command's Options (with a `help`
// member) and a run taking them back: the options are held type-erased.
template <class Options>
Subcommand command(std::string name, std::string description, Processes processes, Progress progress,
                   std::function<Options(const std::vector<std::string>&, const ParseContext&)> parse,
                   std::function<std::string()> help, std::function<int(const Options&, const RunContext&)> run) {
  Subcommand c;
  c.name = std::move(name);
  c.description = std::move(description);
  c.single_process = processes == Processes::kOne;
  c.shows_progress = progress == Progress::kShown;
  c.parse = [parse = std::move(parse)](const std::vector<std::string>& args, const ParseContext& ctx) {
    Options options = parse(args, ctx);
    const bool help = options.help;
    return ParsedCommand{std::move(options), help};
  };
  c.help = std::move(help);
  c.run = [run = std::move(run)](const std::any& options, const RunContext& ctx) {
    return run(std::any_cast<const Options&>(options), ctx);
  };
  return c;
}

// A parser that needs nothing but the arguments.
template <class Options>
std::function<Options(const std::vector<std::string>&, const ParseContext&)> plain(
    Options (*parse)(const std::vector<std::string>&)) {
  return [parse](const std::vector<std::string>& args, const ParseContext&) { return parse(args); };
}

// `mtrain infer`: the ranks of the launch hold one model (TP x PP).
int run_infer_command(const infer::InferOptions& options, const RunContext& run) {
  infer::InferContext ctx;
  ctx.device_index = run.placement.device;
  ctx.local_ranks = run.world.local_size;
  ctx.stdout_is_tty = isatty(STDOUT_FILENO) != 0;
  if (!run.mpi) return infer::run_infer(options, ctx, std::cin, std::cout);
  parallel::ProcessGridConfig g;
  g.world_size = run.world.size;
  g.tensor_model_parallel_size = options.tensor_model_parallel_size;
  g.pipeline_model_parallel_size = options.pipeline_model_parallel_size;
  parallel::ParallelState state = parallel::make_mpi_parallel_state(parallel::ProcessGrid(g), run.mpi->comm());
  ctx.parallel = &state;
  return infer::run_infer(options, ctx, std::cin, std::cout);
}

std::vector<Subcommand> make_subcommands() {
  std::vector<Subcommand> all;
  all.push_back(command<launch::DevicesOptions>(
      "devices", "show the simulated NPU pool and which rank owns which device (like npu-smi)", Processes::kAny,
      Progress::kNone,
      [](const std::vector<std::string>& args, const ParseContext& ctx) {
        launch::DevicesOptions o = launch::parse_devices_args(args);
        if (!o.help) *ctx.placement = launch::place_device(o.device_profile, ctx.env, ctx.world, ctx.warnings);
        return o;
      },
      launch::devices_help,
      [](const launch::DevicesOptions& o, const RunContext& ctx) {
        return launch::run_devices_command(o, ctx.placement, ctx.world, ctx.mpi ? ctx.mpi->comm() : MPI_COMM_NULL);
      }));
  all.push_back(command<launch::NpuSmiOptions>(  // reads the ranks' published status
      "npu-smi", "`npu-smi info [-t topo]`: the node's simulated NPUs, their HBM use and mtrain processes",
      Processes::kOne, Progress::kNone, plain(launch::parse_npu_smi_args), launch::npu_smi_help,
      [](const launch::NpuSmiOptions& o, const RunContext& ctx) {
        return launch::run_npu_smi_command(o, ctx.env, std::cout);
      }));
  all.push_back(command<exporting::ExportOptions>(
      "export", "convert weights: mtrain checkpoint -> Hugging Face directory (--to_hf) or back (--to_mcore)",
      Processes::kOne, Progress::kShown, plain(exporting::parse_export_args), exporting::export_help,
      [](const exporting::ExportOptions& o, const RunContext&) {
        PosixFileSystem fs;
        return exporting::run_export(o, fs);
      }));
  all.push_back(command<infer::InferOptions>(  // one model replica over the launch's ranks, each on its NPU
      "infer", "answer with a trained model (swift infer): chat on stdin, or a dataset into JSONL; KV cache",
      Processes::kAny, Progress::kNone,
      [](const std::vector<std::string>& args, const ParseContext& ctx) {
        infer::InferOptions o = infer::parse_infer_args(args);
        if (!o.help)
          *ctx.placement =
              launch::place_device(o.device_profile.value_or("Ascend910B3"), ctx.env, ctx.world, ctx.warnings);
        return o;
      },
      infer::infer_help, run_infer_command));
  all.push_back(command<data::TokenizerCommandOptions>(
      "tokenizer", "encode or decode with a tokenizer (tokenizer.json, tokenizer.model) to check ids", Processes::kAny,
      Progress::kNone, plain(data::parse_tokenizer_args), data::tokenizer_help,
      [](const data::TokenizerCommandOptions& o, const RunContext&) {
        return data::run_tokenizer_command(o, std::cout);
      }));
  all.push_back(command<observe::CompareOptions>(
      "compare", "compare two precision dumps (--precision_dump_path) and name the first diverging module",
      Processes::kOne, Progress::kNone, plain(observe::parse_compare_args), observe::compare_help,
      [](const observe::CompareOptions& o, const RunContext&) { return observe::run_compare(o, std::cout); }));
  all.push_back(command<plan::PlanOptions>(  // one process plans the whole world
      "plan",
      "search TP/PP/VPP/DP, micro-batch, recompute, distributed optimizer and SP for the fastest "
      "layout that fits (dry-run checked)",
      Processes::kOne, Progress::kShown,
      [](const std::vector<std::string>& args, const ParseContext& ctx) {
        // NNODES / NPROC_PER_NODE, as for --dry_run, unless --nnodes / --nproc_per_node say otherwise.
        const launch::LaunchRequest request = launch::read_launch_request(ctx.env);
        return plan::parse_plan_args(args, request.nnodes, request.nproc_per_node);
      },
      plan::plan_help,
      [](const plan::PlanOptions& o, const RunContext&) { return plan::run_plan_command(o, std::cout); }));
  all.push_back(command<calibrate::CalibrateOptions>(  // one process re-prices the runs' dry runs
      "calibrate",
      "fit a device profile's efficiencies to measured runs (mtrain run directories, Megatron-LM logs) and write "
      "the calibrated profile to plan with",
      Processes::kOne, Progress::kNone, plain(calibrate::parse_calibrate_args), calibrate::calibrate_help,
      [](const calibrate::CalibrateOptions& o, const RunContext&) {
        return calibrate::run_calibrate_command(o, std::cout);
      }));
  all.push_back(command<report::ReportOptions>(
      "report", "write a run's HTML report with SVG plots (loss, lr, grad norm, memory...); --compare overlays runs",
      Processes::kOne, Progress::kNone, plain(report::parse_report_args), report::report_help,
      [](const report::ReportOptions& o, const RunContext&) { return report::run_report_command(o, std::cout); }));
  all.push_back(command<data::PreprocessCommandOptions>(
      "preprocess_data", "tokenize JSONL into Megatron's indexed .bin/.idx pretraining format (for pt --data_path)",
      Processes::kOne, Progress::kShown, plain(data::parse_preprocess_args), data::preprocess_help,
      [](const data::PreprocessCommandOptions& o, const RunContext&) {
        return data::run_preprocess_command(o, std::cout);
      }));
  return all;
}

}  // namespace

const std::vector<Subcommand>& subcommands() {
  static const std::vector<Subcommand> table = make_subcommands();
  return table;
}

const Subcommand* find_subcommand(const std::string& name) {
  for (const Subcommand& c : subcommands())
    if (c.name == name) return &c;
  return nullptr;
}

}  // namespace mtrain::app
