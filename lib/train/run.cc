#include "train/run.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include "common/errors.h"
#include "common/file_system.h"
#include "config/json.h"
#include "config/profiles.h"
#include "config/tensorboard_args.h"
#include "config/validate.h"
#include "data/data_pipeline.h"
#include "device/cost_model.h"
#include "model/flops.h"
#include "model/gpt.h"
#include "observe/logger.h"
#include "observe/npu_status_hook.h"
#include "observe/precision_dump.h"
#include "observe/profiler_hook.h"
#include "observe/progress_hook.h"
#include "observe/step_record.h"
#include "observe/tensorboard_hook.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "parallel/pipeline_schedule.h"
#include "report/report.h"
#include "train/adapter_load.h"
#include "train/base_reference.h"
#include "train/checkpointing.h"
#include "train/cpu_binding.h"
#include "train/fault_injection.h"
#include "train/generate.h"
#include "train/grad_sync.h"
#include "train/rank_build.h"
#include "train/shared_paths.h"
#include "train/trainer.h"
#include "train/watchdog.h"

namespace mtrain::train {

namespace fs = std::filesystem;

// Every rank creates the directory (a no-op after check_shared_paths, which
// proved it is one directory on every node); the first rank records the
// arguments.
static void prepare_output_dir(const config::Args& args, bool write_args) {
  std::error_code ec;
  fs::create_directories(args.output_dir, ec);
  if (ec)
    throw ConfigError(fmt::format("--output_dir {}: cannot create the directory: {}", args.output_dir, ec.message()),
                      "choose a writable --output_dir");
  if (!write_args) return;
  const fs::path p = fs::path(args.output_dir) / "args.json";
  std::ofstream f(p);
  f << config::args_to_json(args) << "\n";
  if (!f) throw ConfigError(fmt::format("cannot write {}", p.string()), "check --output_dir is writable");
}

// Who this rank is, for `mtrain npu-smi info`.
static device::NpuProcessStatus npu_status_identity(const config::Args& args, const RunContext& ctx,
                                                    const parallel::ParallelState& state, const device::Device& dev) {
  device::NpuProcessStatus s;
  s.node = ctx.node;
  s.npu = dev.index();
  s.rank = state.rank();
  s.pid = static_cast<int>(getpid());
  s.start_ticks = device::process_start_ticks(s.pid);
  s.process_name = "mtrain " + args.command;
  s.profile = dev.profile().name;
  s.chip_name = dev.profile().chip_name;
  s.hbm_bytes = dev.profile().hbm_bytes;
  return s;
}

// Continuation lines of a multi-line text line up under the first.
static std::string indent(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '\n' ? std::string("\n             ") : std::string(1, c);
  return out;
}

static void print_answers(const config::Args& args, model::GptModel& model, const data::DataPipeline& data,
                          parallel::ParallelState& state) {
  const auto prompts = data.sample_prompts(args.num_generate_samples);
  if (prompts.empty()) return;
  // Every DP replica holds the same model; the first one answers.
  if (state.coords().dp != 0) return;
  if (state.grid().cp() > 1) {  // decoding keeps whole sequences: not split over CP ranks
    if (state.rank() == 0)
      fmt::print(
          "\n > sample answers skipped: generation does not run under context parallelism "
          "(use mtrain infer on the saved checkpoint)\n");
    return;
  }
  const bool print = state.rank() == 0;
  if (print) fmt::print("\nWhat the trained model answers (greedy decoding):\n");
  for (const auto& p : prompts) {
    const std::vector<int32_t> out =
        greedy_generate(model, p.prompt_tokens, args.max_new_tokens, data.stop_ids(), &state);
    if (print)
      fmt::print("  prompt:    {}\n  reference: {}\n  mtrain:    {}\n\n", indent(p.question), indent(p.reference),
                 indent(data.decode_answer(out)));
  }
  std::fflush(stdout);
}

// A rank that waits for a stuck or dead peer ends instead of hanging: the
// watchdog (world size > 1 only: one process has no peer to wait for) and its
// beats, then the fault-injection test seam (which may arm the checkpoint
// file system `fs`). Returns the watchdog or null.
static std::shared_ptr<Watchdog> add_watchdog_hooks(observe::HookList& hooks, const config::Args& args,
                                                    const parallel::ParallelState& state,
                                                    const std::optional<InjectedFault>& fault, FileSystem& fs) {
  std::shared_ptr<Watchdog> watchdog;
  if (state.world_size() > 1) {
    watchdog = start_rank_watchdog(args.distributed_timeout_minutes * 60, state.rank());
    hooks.add(std::make_shared<WatchdogHook>(watchdog));
  }
  if (fault) hooks.add(std::make_shared<FaultInjectionHook>(*fault, state.rank(), fs));
  return watchdog;
}

// --log_throughput's simulated device time: a recorder of the iterations the
// logger prints (installed only with the flag, so a run without it records
// nothing), priced on this rank's device profile; groups span nodes as this
// launch places ranks (`local_ranks` per node).
static std::function<double()> simulated_step_clock(observe::HookList& hooks, const config::Args& args,
                                                    const parallel::ParallelState& state, const device::Device& dev,
                                                    const model::ModelConfig& mc, int64_t train_iters,
                                                    int local_ranks) {
  const int64_t interval = args.log_interval;
  const bool sixteen_bit = mc.dtype != DType::kF32;
  auto recorder = std::make_shared<observe::StepRecorder>(
      [interval, train_iters](int64_t it) { return it % interval == 0 || it == train_iters; }, sixteen_bit ? 2 : 4);
  hooks.add(recorder);
  const auto group_nodes = state.grid().group_nodes(state.rank(), std::max(1, local_ranks));
  const observe::PhaseOverlap overlap =
      observe::PhaseOverlap::of_profile(dev.profile(), args.tp_comm_overlap || args.use_ascend_mc2);
  return [recorder, cost = device::CostModel(dev.profile()), sixteen_bit, group_nodes, overlap] {
    const auto nodes = [&](std::string_view g) { return parallel::ProcessGrid::nodes_of(group_nodes, g); };
    return observe::record_cost(recorder->record(), cost, sixteen_bit, nodes, overlap).busy_s();
  };
}

// --log_throughput's numbers, computed once for the last rank's logger and
// TensorBoard writer (empty elsewhere or without the flag).
struct Throughput {
  double flops_per_iteration = 0;
  std::function<double()> simulated_step_seconds;
};
static Throughput throughput(observe::HookList& hooks, const config::Args& args, const parallel::ParallelState& state,
                             const device::Device& dev, const model::ModelConfig& mc, int64_t train_iters,
                             int local_ranks) {
  if (!args.log_throughput || state.rank() != state.world_size() - 1) return {};
  // Megatron counts the global batch at the configured sequence length.
  return {model::megatron_flops_per_iteration(mc, args.global_batch_size, mc.seq_length),
          simulated_step_clock(hooks, args, state, dev, mc, train_iters, local_ranks)};
}

// Megatron's logging ranks: iteration and validation lines (and
// logging.jsonl) on the last rank, memory lines on every DP-rank-0 rank.
static void add_logger(observe::HookList& hooks, const config::Args& args, const parallel::ParallelState& state,
                       const device::Device& dev, const Throughput& tput, ProgressSink* progress) {
  observe::LoggerOptions lo;
  lo.log_interval = args.log_interval;
  lo.log_throughput = args.log_throughput;
  lo.rank = state.rank();
  lo.world_size = state.world_size();
  lo.jsonl_path = (fs::path(args.output_dir) / "logging.jsonl").string();
  lo.print_log = state.rank() == state.world_size() - 1;
  lo.print_memory = state.coords().dp == 0;
  lo.flops_per_iteration = tput.flops_per_iteration;
  lo.simulated_step_seconds = tput.simulated_step_seconds;
  if (lo.print_log || lo.print_memory) hooks.add(std::make_shared<observe::MegatronLogger>(lo, dev));
  // After the logger: its line goes out first, the progress line is drawn below it.
  if (lo.print_log && args.progress && progress) hooks.add(std::make_shared<observe::ProgressHook>(progress));
}

// TensorBoard event files: written by the last rank, as Megatron's writer.
static void add_tensorboard(observe::HookList& hooks, const config::Args& args, const parallel::ParallelState& state,
                            const device::Device& dev, const Throughput& tput) {
  if (!config::tensorboard_enabled(args) || state.rank() != state.world_size() - 1) return;
  observe::TensorBoardOptions o;
  o.dir = config::tensorboard_dir(args);
  o.interval = args.tensorboard_log_interval;
  o.log_interval = args.log_interval;
  o.queue_size = static_cast<size_t>(args.tensorboard_queue_size);
  o.timers = args.log_timers_to_tensorboard;
  o.memory = args.log_memory_to_tensorboard;
  o.validation_ppl = args.log_validation_ppl_to_tensorboard;
  o.world_size = args.log_world_size_to_tensorboard;
  o.loss_scale = args.log_loss_scale_to_tensorboard;
  o.world_size_value = state.world_size();
  o.log_throughput = args.log_throughput;
  o.flops_per_iteration = tput.flops_per_iteration;
  o.simulated_step_seconds = tput.simulated_step_seconds;
  hooks.add(std::make_shared<observe::TensorBoardHook>(std::move(o), dev));
}

// --report: the rank that wrote logging.jsonl writes the report. Training is
// done and saved by now, so a report that cannot be written is a warning.
static void write_run_report(const std::string& output_dir) {
  try {
    report::ReportOptions options;
    options.run_dir = output_dir;
    const report::ReportFiles files = report::write_report(options);
    fmt::print(" > report: {} (`mtrain report {}` rewrites it)\n", files.html, output_dir);
  } catch (const Error& e) {
    fmt::print(stderr, "mtrain: warning: the run report was not written: {}\n", e.what());
  }
  std::fflush(stdout);
}

// Threads and their cores for this rank; then, before any data is read, the
// check that a save, load or profile directory is one directory on every node
// (else it would fail only at the first save). Returns the threads per rank.
static int prepare_rank(const config::Args& args, const RunContext& ctx, parallel::ParallelState& state) {
  const int threads = configure_threads(args, ctx.local_ranks, static_cast<int>(ctx.affinity.cores.size()));
  if (const std::string line = bind_rank_threads(ctx.affinity_mode, ctx.affinity, threads); !line.empty())
    fmt::print(" > rank {} on npu:{}: {}\n", state.rank(), ctx.device_index, line);
  check_shared_paths(args, state.world(), ctx.node);
  return threads;
}

// Megatron's lines about the model: the parameters on data-parallel rank 0 of
// each model-parallel rank (with LoRA, the trainable ones), then the layout on the first rank.
static void print_model_summary(const config::Args& args, model::GptModel& model, const model::ModelConfig& mc,
                                const device::Device& dev, const parallel::ParallelState& state, int threads) {
  const parallel::RankCoords rc = state.coords();
  if (rc.dp == 0)
    fmt::print(" > number of parameters on (tensor, pipeline) model parallel rank ({}, {}): {}\n", rc.tp, rc.pp,
               model.params().count());
  if (rc.dp == 0 && model.params().trainable_count() != model.params().count())  // LoRA: the base is frozen
    fmt::print(" > of which trainable on (tensor, pipeline) model parallel rank ({}, {}): {} ({:.4f}%)\n", rc.tp, rc.pp,
               model.params().trainable_count(),
               100.0 * static_cast<double>(model.params().trainable_count()) / model.params().count());
  if (state.rank() == 0)
    fmt::print(
        " > {} on {} with {} threads per rank; tensor parallel {}{}, pipeline parallel {}{}, data parallel {}{}\n",
        model::describe(mc), dev.name(), threads, mc.tp, mc.sequence_parallel ? " (sequence parallel)" : "",
        args.pipeline_model_parallel_size, mc.chunk_list().size() > 1 ? " (interleaved)" : "", state.grid().dp(),
        mc.cp > 1 ? fmt::format(", context parallel {} ({})", mc.cp, args.context_parallel_algo) : "");
  std::fflush(stdout);
}

// What guards a run against a stuck peer and the test seam's faults: the
// checkpoint file system (fault-injecting under a save fault) and the watchdog (or null).
struct RunGuards {
  std::unique_ptr<FileSystem> checkpoint_fs;
  std::shared_ptr<Watchdog> watchdog;
};

// The step hooks that watch the run (log, TensorBoard, npu status, precision
// dump, the caller's), then the watchdog and fault injection. The checkpoint
// and profiler hooks come later, with the trainer they read.
static RunGuards add_observer_hooks(observe::HookList& hooks, const config::Args& args, const RunContext& ctx,
                                    const parallel::ParallelState& state, const device::Device& dev,
                                    const model::ModelConfig& mc, int64_t train_iters) {
  const Throughput tput = throughput(hooks, args, state, dev, mc, train_iters, ctx.local_ranks);
  add_logger(hooks, args, state, dev, tput, ctx.progress);
  add_tensorboard(hooks, args, state, dev, tput);
  hooks.add(
      std::make_shared<observe::NpuStatusHook>(dev, npu_status_identity(args, ctx, state, dev), args.log_interval));
  if (auto dump = observe::make_precision_dump_hook(args, state, dtype_name(mc.dtype))) hooks.add(dump);
  for (const auto& h : ctx.hooks) hooks.add(h);
  // fault_injection.h: the only reader of these variables; a save fault
  // makes the checkpoint file system a fault-injecting one.
  const std::optional<InjectedFault> fault =
      parse_injected_fault(std::getenv("MTRAIN_FAULT_RANK"), std::getenv("MTRAIN_FAULT"));
  RunGuards g;
  g.checkpoint_fs = checkpoint_file_system(fault);
  g.watchdog = add_watchdog_hooks(hooks, args, state, fault, *g.checkpoint_fs);
  return g;
}

// Where training starts: a resumed checkpoint (--load), else --model's
// weights, then --adapter_load's adapters; and what the saves record. `to`
// takes the checkpoint's seed, `setup` its schedule (--use_checkpoint_opt_param_scheduler).
struct RunStart {
  std::optional<Resumed> resumed;
  SaveSettings save;
};
static RunStart load_start(const config::Args& args, FileSystem& fs, TrainingState& ts, TrainerOptions& to,
                           TrainerSetup& setup) {
  RunStart start;
  std::optional<Resumed>& resumed = start.resumed;
  // --load (--mcore_model) wins over --model's weights, as in Megatron-SWIFT;
  // --model still gives the shape and tokenizer.
  if (args.adapter_load && args.load && !args.finetune)
    throw ConfigError(fmt::format("--adapter_load {} with --load {}: a resumed run already has its adapters",
                                  *args.adapter_load, *args.load),
                      "add --finetune to start the adapters from --adapter_load on --load's base weights");
  if (args.load) resumed = load_training_checkpoint(fs, load_settings(args), ts);
  if (!resumed && args.model) load_hf_model(fs, *args.model, ts);
  if (args.adapter_load) load_adapters(fs, *args.adapter_load, ts);  // on top of the base, before training
  if (resumed && resumed->seed) to.seed = *resumed->seed;
  start.save = save_settings(args);
  // LoRA: checkpoints hold the trainable tensors and name the frozen base (base_reference.h).
  if (ts.model.params().trainable_count() != ts.model.params().count()) {
    const nlohmann::json base = resumed      ? resumed->base
                                : args.model ? hf_base_reference(fs, *args.model)
                                             : random_base_reference(static_cast<uint64_t>(args.seed));
    start.save.base_json = base.dump();
  }
  // --use_checkpoint_opt_param_scheduler: train (and save) on the checkpoint's schedule.
  if (resumed && resumed->schedule) {
    setup.scheduler = optim::LrScheduler(resumed->schedule->lr);
    setup.optimizer.set_weight_decay(resumed->schedule->weight_decay);
    start.save.schedule = *resumed->schedule;
  }
  return start;
}

// After training: the report, the watchdog's end, the sample answers and this
// rank's device accounting for the caller.
static void finish_run(const config::Args& args, const RunContext& ctx, model::GptModel& model,
                       const data::DataPipeline& data, parallel::ParallelState& state, const device::Device& dev,
                       Watchdog* watchdog) {
  if (args.report && state.rank() == state.world_size() - 1) write_run_report(args.output_dir);
  // Without TP/PP the sample answers are one rank's own compute: no peer to wait for.
  if (watchdog && args.tensor_model_parallel_size * args.pipeline_model_parallel_size == 1) watchdog->stop();
  // The last rank's closing validation line goes out before rank 0's answers.
  state.world().barrier();
  print_answers(args, model, data, state);
  if (ctx.memory_out) *ctx.memory_out = dev.stats();
}

int run_training(const config::Args& input, const RunContext& ctx) {
  config::Args args = input;
  std::unique_ptr<parallel::ParallelState> own_state;
  parallel::ParallelState* state = ctx.parallel;
  if (!state) {
    own_state =
        std::make_unique<parallel::ParallelState>(parallel::make_self_parallel_state(process_grid_from_args(args)));
    state = own_state.get();
  }
  const parallel::RankCoords rc = state->coords();
  const bool first_rank = state->rank() == 0;
  const int threads = prepare_rank(args, ctx, *state);
  // May derive train_iters from epochs. Every rank tokenizes; the first shows
  // it (the progress line, when stdout is a terminal).
  data::DataPipeline data =
      data::build_data_pipeline(args, first_rank, first_rank && args.progress ? ctx.progress : nullptr);
  if (!args.vocab_size) args.vocab_size = static_cast<int>(data.vocab_size());  // recorded in args.json
  prepare_output_dir(args, first_rank);

  device::Device dev(device_profile(args), ctx.device_index);
  const model::ModelConfig mc = rank_model_config(args, rc);
  TrainerOptions to = trainer_options(args);
  if (first_rank)
    fmt::print(" > padded vocab (size: {}) with {} dummy tokens (new size: {})\n", mc.vocab, mc.padded_vocab - mc.vocab,
               mc.padded_vocab);
  const std::unique_ptr<model::GptModel> model_ptr = build_rank_model(args, dev, *state, to, /*meta=*/false);
  model::GptModel& model = *model_ptr;
  print_model_summary(args, model, mc, dev, *state, threads);

  TrainerSetup setup(args, model, dev, *state, to);
  observe::HookList hooks;
  const RunGuards guards = add_observer_hooks(hooks, args, ctx, *state, dev, mc, to.train_iters);
  const data::DataShard shard = data_shard(mc, *state);
  std::unique_ptr<data::BatchSource> source = data.train_source(args, shard);
  const std::vector<data::Batch> val = data.validation_batches(args, shard);

  FileSystem& fs = *guards.checkpoint_fs;
  TrainingState ts{model, setup.optimizer, setup.scaler.get(), *source, *state, to.bucket_elems,
                   // Every rank loads its blocks; the first shows it.
                   first_rank && args.progress ? ctx.progress : nullptr};
  RunStart start = load_start(args, fs, ts, to, setup);
  if (guards.watchdog) guards.watchdog->beat("trainer starts");
  Trainer trainer(to, model, setup.optimizer, setup.scheduler, setup.scaler.get(), *source, &val, hooks, state);
  if (start.resumed) trainer.restore(start.resumed->counters);
  start.save.seed = to.seed;
  hooks.add(std::make_shared<CheckpointHook>(fs, std::move(start.save), ts, trainer, guards.watchdog));
  PosixFileSystem profile_fs;
  if (args.profile)
    hooks.add(std::make_shared<observe::ProfilerHook>(observe::profiler_options(args), dev, state, state->rank(),
                                                      profile_fs));
  trainer.train();
  finish_run(args, ctx, model, data, *state, dev, guards.watchdog.get());
  return 0;
}

}  // namespace mtrain::train
