#include "plan/dry_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <set>

#include "common/errors.h"
#include "data/data_pipeline.h"
#include "data/dataset_sample.h"
#include "data/tokenizer.h"
#include "model/model_config.h"
#include "parallel/parallel_state.h"
#include "plan/dry_run_lengths.h"
#include "plan/dry_step.h"
#include "train/rank_build.h"

namespace mtrain::plan {

// The bytes a class holds in weights, gradients and optimizer state and in its activation slots.
static int64_t states_and_slots(const ClassMemory& m) {
  const auto& held = m.stats.by_category;
  return held[static_cast<int>(device::MemCategory::kWeights)] + held[static_cast<int>(device::MemCategory::kGrads)] +
         held[static_cast<int>(device::MemCategory::kOptimizer)] + m.slot_bytes;
}

// Builds one rank's objects shape-only and records its device's accounting.
// With `repeat_steady_state` the step may run its steady state once for its
// repeats; when the shortcut's checks fail the rank is built again and
// stepped whole. abandon_above > 0: when the built rank's states and slots
// exceed it, the class is returned as built, not stepped (abandoned).
static ClassMemory simulate_class(const config::Args& args, const std::shared_ptr<const parallel::ProcessGrid>& shared,
                                  const device::DeviceProfile& planning_profile, const RankClass& k,
                                  data::DataPipeline* data, std::vector<int64_t>* lengths, bool repeat_steady_state,
                                  int64_t abandon_above) {
  const parallel::ProcessGrid& grid = *shared;
  parallel::ParallelState state = parallel::make_meta_parallel_state(shared, k.representative);
  device::Device dev(planning_profile, 0);
  const train::TrainerOptions to = train::trainer_options(args);
  const auto model = train::build_rank_model(args, dev, state, to, /*meta=*/true);
  train::TrainerSetup setup(args, *model, dev, state, to, /*meta=*/true);
  ClassMemory m;
  m.rank_class = k;
  m.tp_rank = state.coords().tp;
  m.dp_rank = state.coords().dp;
  m.parameters = model->params().count();
  for (int slots : model->config().chunk_slots) m.activation_slots += slots;
  std::set<int> pools;
  for (int c = 0; c < model->num_chunks(); ++c) {
    m.chunk_slot_bytes.push_back(model->slot_bytes(c));
    if (pools.insert(model->pool(c)).second) m.slot_bytes += model->slot_bytes(c) * model->slots(c);
  }
  m.stats = dev.stats();
  m.group_nodes = grid.group_nodes(k.representative, planning_profile.devices_per_node);
  if (abandon_above > 0 && states_and_slots(m) > abandon_above) {
    m.abandoned = true;
    return m;
  }
  std::unique_ptr<data::BatchSource> source;
  if (data) source = data->train_source(args, train::data_shard(model->config(), state));
  std::optional<DryStep> step =
      run_dry_step(args, *model, setup, state, to, source.get(), lengths, repeat_steady_state);
  if (!step) return simulate_class(args, shared, planning_profile, k, data, lengths, false, 0);
  m.step = std::move(step->record);
  m.stats = step->stats;
  m.microbatches_stepped = step->microbatches_stepped;
  m.activation_buffers = dev.live_by_name(device::MemCategory::kActivations);
  m.communicators.assign(dev.communicators().begin(), dev.communicators().end());
  return m;
}

// The vocabulary as a real run finds it: --vocab_size (or the preset's),
// else the tokenizer's (the tokenizer file is read; no dataset is).
static config::Args with_vocab_size(const config::Args& input) {
  config::Args args = input;
  if (args.vocab_size) return args;
  if (!args.tokenizer)
    throw ConfigError("--dry_run needs the vocabulary size: neither --vocab_size nor --tokenizer is set",
                      "pass --vocab_size N or --tokenizer <tokenizer.json> (a --model_preset such as llama2-7b sets "
                      "the vocabulary size)");
  args.vocab_size = static_cast<int>(data::Tokenizer::load(*args.tokenizer).vocab_size());
  return args;
}

// An SFT job's dataset, read and tokenized as the run reads it (at most
// --dry_run_samples of each file), when every file of it is there (a plan
// may be made before the data exists); or samples of --dry_run_lengths.
std::optional<data::DataPipeline> read_sft_data(const config::Args& input) {
  if (input.command != "sft") return std::nullopt;
  config::Args args = input;
  if (args.dry_run_lengths) {
    args = with_vocab_size(args);
    return data::lengths_pipeline(
        args, parse_dry_run_lengths(*args.dry_run_lengths, args.max_length.value_or(args.seq_length.value_or(0))));
  }
  if (input.dataset.empty()) return std::nullopt;
  for (std::string& f : args.dataset) {
    const data::DatasetSpec spec = data::parse_dataset_spec(f);
    if (!std::filesystem::exists(spec.path)) return std::nullopt;
    if (args.dry_run_samples)
      f = fmt::format("{}#{}", spec.path,
                      std::min<int64_t>(spec.num_samples.value_or(*args.dry_run_samples), *args.dry_run_samples));
  }
  return data::build_data_pipeline(args, /*verbose=*/false);
}

DryRun dry_run(const config::Args& input, DryRunData want) {
  const config::Args args = with_vocab_size(input);  // the tokenizer read once, not again by each part
  std::optional<data::DataPipeline> data;
  if (want == DryRunData::kDataset) data = read_sft_data(args);
  return dry_run(args, data ? &*data : nullptr);
}

DryRun dry_run(const config::Args& input, data::DataPipeline* data, bool repeat_steady_state, int64_t abandon_above) {
  const config::Args args = with_vocab_size(input);
  DryRun r;
  r.data_source = args.dry_run_lengths ? "--dry_run_lengths"
                  : args.dry_run_samples
                      ? fmt::format("the dataset (--dry_run_samples {} of each file)", *args.dry_run_samples)
                      : "the dataset";
  r.profile = train::device_profile(args);
  const auto shared_grid = std::make_shared<const parallel::ProcessGrid>(train::process_grid_from_args(args));
  const parallel::ProcessGrid& grid = *shared_grid;  // one grid for every class's state
  r.world_size = grid.world_size();
  r.tp = grid.tp();
  r.pp = grid.pp();
  r.dp = grid.dp();
  r.cp = grid.cp();
  r.whole_model = train::rank_model_config(args, grid.coords(0));
  r.model_description = model::describe(r.whole_model);
  r.chunks = static_cast<int>(r.whole_model.chunk_list().size());
  r.microbatches = args.num_micro_batches;
  r.global_batch = args.global_batch_size;
  r.seq_length = r.whole_model.seq_length;
  r.overlap = observe::PhaseOverlap::of_profile(r.profile, args.tp_comm_overlap || args.use_ascend_mc2);
  // Measure the whole plan even where it does not fit; memory_report judges it.
  device::DeviceProfile planning = r.profile;
  planning.hbm_bytes = std::numeric_limits<int64_t>::max() / 4;
  for (const RankClass& k : rank_classes(grid, args.use_distributed_optimizer)) {
    std::vector<int64_t> lengths;
    r.classes.push_back(
        simulate_class(args, shared_grid, planning, k, data, &lengths, repeat_steady_state, abandon_above));
    if (r.classes.size() == 1) r.data_lengths = std::move(lengths);
    if (r.classes.back().abandoned) {
      r.abandoned = true;
      break;
    }
  }
  return r;
}

}  // namespace mtrain::plan
