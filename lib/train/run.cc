#include "train/run.h"

#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/errors.h"
#include "config/json.h"
#include "config/profiles.h"
#include "config/validate.h"
#include "model/gpt.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "train/data_pipeline.h"
#include "train/generate.h"
#include "train/logger.h"
#include "train/trainer.h"

namespace mtrain::train {

namespace fs = std::filesystem;

int configure_threads(const config::Args& args, int local_ranks) {
  int n = 0;
  if (args.num_threads) {
    n = *args.num_threads;
  } else if (const char* e = std::getenv("OMP_NUM_THREADS")) {
    n = std::atoi(e);
  } else if (const char* e2 = std::getenv("OPENBLAS_NUM_THREADS")) {
    n = std::atoi(e2);
  }
  if (n <= 0) n = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, local_ranks));
  // The OpenMP OpenBLAS build runs its GEMMs on this OpenMP pool, but (Debian's
  // 0.3.21 at least) sizes them from its own count, fixed at load time from
  // OPENBLAS_NUM_THREADS / OMP_NUM_THREADS / the core count and not from
  // omp_set_num_threads. Set both, or --num_threads 1 (or one rank per core
  // under mpirun) would still run 2-thread GEMMs and oversubscribe the cores.
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
  return n;
}

static void prepare_output_dir(const config::Args& args) {
  std::error_code ec;
  fs::create_directories(args.output_dir, ec);
  if (ec)
    throw ConfigError(fmt::format("--output_dir {}: cannot create the directory: {}", args.output_dir, ec.message()),
                      "choose a writable --output_dir");
  const fs::path p = fs::path(args.output_dir) / "args.json";
  std::ofstream f(p);
  f << config::args_to_json(args) << "\n";
  if (!f) throw ConfigError(fmt::format("cannot write {}", p.string()), "check --output_dir is writable");
}

static device::DeviceProfile device_profile(const config::Args& args) {
  const config::DeviceProfileSpec s = config::load_device_profile(args.device_profile);
  device::DeviceProfile p;
  p.name = s.name;
  p.hbm_bytes = s.hbm_bytes;
  p.peak_tflops_16bit = s.peak_tflops_16bit;
  p.peak_tflops_fp32 = s.peak_tflops_fp32;
  p.hbm_gbps = s.hbm_gbps;
  p.intra_node_link_gbps = s.intra_node_link_gbps;
  p.inter_node_link_gbps = s.inter_node_link_gbps;
  p.devices_per_node = s.devices_per_node;
  p.allocator_block_bytes = s.allocator_block_bytes;
  return p;
}

static optim::LrScheduleConfig schedule_config(const config::Args& a) {
  optim::LrScheduleConfig s;
  s.lr = a.lr.value();
  s.min_lr = a.min_lr;
  s.lr_warmup_init = a.lr_warmup_init;
  s.warmup_iters = a.lr_warmup_iters;
  s.warmup_fraction = a.lr_warmup_fraction;
  s.decay_iters = a.lr_decay_iters.value_or(a.train_iters.value());
  s.style = a.lr_decay_style;
  s.wsd_decay_iters = a.lr_wsd_decay_iters.value_or(0);
  s.wsd_decay_style = a.lr_wsd_decay_style;
  s.samples_per_iteration = a.global_batch_size;
  return s;
}

// Continuation lines of a multi-line text line up under the first.
static std::string indent(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '\n' ? std::string("\n             ") : std::string(1, c);
  return out;
}

static void print_answers(const config::Args& args, model::GptModel& model, const DataPipeline& data) {
  const auto prompts = data.sample_prompts(args.num_generate_samples);
  if (prompts.empty()) return;
  fmt::print("\nWhat the trained model answers (greedy decoding):\n");
  for (const auto& p : prompts) {
    const std::vector<int32_t> out = greedy_generate(model, p.prompt_tokens, args.max_new_tokens, data.stop_ids());
    fmt::print("  prompt:    {}\n  reference: {}\n  mtrain:    {}\n\n", indent(p.question), indent(p.reference),
               indent(data.decode_answer(out)));
  }
  std::fflush(stdout);
}

int run_training(const config::Args& input) {
  config::Args args = input;
  // Ranks sharing this node (set by mpirun); each gets an equal share of the cores.
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int threads = configure_threads(args, local ? std::max(1, std::atoi(local)) : 1);
  DataPipeline data = build_data_pipeline(args);                                // may derive train_iters from epochs
  if (!args.vocab_size) args.vocab_size = static_cast<int>(data.vocab_size());  // recorded in args.json
  prepare_output_dir(args);

  device::Device dev(device_profile(args), 0);
  const model::ModelConfig mc = model::model_config_from_args(args, *args.vocab_size);
  fmt::print(" > padded vocab (size: {}) with {} dummy tokens (new size: {})\n", mc.vocab, mc.padded_vocab - mc.vocab,
             mc.padded_vocab);
  model::GptModel model(mc, dev);
  fmt::print(" > number of parameters on (tensor, pipeline) model parallel rank (0, 0): {}\n", model.params().numel());
  fmt::print(" > {} on {} with {} threads\n", model::describe(mc), dev.name(), threads);

  optim::OptimizerConfig oc;
  oc.type = args.optimizer;
  oc.beta1 = args.adam_beta1;
  oc.beta2 = args.adam_beta2;
  oc.eps = args.adam_eps;
  oc.weight_decay = args.weight_decay;
  oc.sgd_momentum = args.sgd_momentum;
  optim::Optimizer optimizer(dev, optimizer_ranges(model.params()), model.params().numel(), mc.dtype, oc);
  optimizer.init_master_from(model.params().params().data());
  optim::LrScheduler scheduler(schedule_config(args));
  optim::DynamicGradScalerConfig sc;
  sc.initial_scale = args.initial_loss_scale;
  sc.min_scale = args.min_loss_scale;
  sc.growth_interval = args.loss_scale_window;
  sc.hysteresis = args.hysteresis;
  std::unique_ptr<optim::GradScaler> scaler = optim::make_grad_scaler(mc.dtype, args.static_loss_scale.value_or(0), sc);

  HookList hooks;
  LoggerOptions lo;
  lo.log_interval = args.log_interval;
  lo.log_throughput = args.log_throughput;
  lo.jsonl_path = (fs::path(args.output_dir) / "logging.jsonl").string();
  hooks.add(std::make_shared<MegatronLogger>(lo, dev));

  TrainerOptions to;
  to.train_iters = args.train_iters.value();
  to.global_batch_size = args.global_batch_size;
  to.eval_interval = args.eval_interval.value_or(0);
  to.clip_grad = args.clip_grad;
  to.check_nonfinite = args.check_for_nan_in_loss_and_grad;
  to.skip_nonfinite = args.on_nonfinite == "skip";
  to.max_consecutive_skips = args.max_consecutive_nonfinite_skips;
  to.seed = static_cast<uint64_t>(args.seed);
  std::unique_ptr<BatchSource> source = data.train_source(args);
  const std::vector<data::Batch> val = data.validation_batches(args);
  Trainer trainer(to, model, optimizer, scheduler, scaler.get(), *source, &val, hooks);
  trainer.train();
  print_answers(args, model, data);
  return 0;
}

}  // namespace mtrain::train
