// The dry run (`mtrain sft|pt ... --dry_run`): plans the whole world in one
// process. For each rank class (rank_classes.h) it builds the rank's real
// model, optimizer (with its distributed-optimizer shard) and activation
// slots through the same construction as a real run (train/rank_build.h),
// with meta tensors and MetaComm, then runs one training iteration of the
// real Trainer on them shape-only (dry_step.h): every byte the real run
// allocates on the NPU is accounted by the same Device allocator, every
// kernel and collective of the step is recorded, and no host storage is
// allocated. No data is read. The simulated device has no capacity limit
// while planning, so a plan that does not fit is still measured whole and
// then judged against the profile's HBM (memory_report.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/args.h"
#include "data/data_pipeline.h"
#include "device/device.h"
#include "model/model_config.h"
#include "plan/dry_step.h"
#include "plan/rank_classes.h"

namespace mtrain::plan {

struct ClassMemory {
  RankClass rank_class;
  int tp_rank = 0, dp_rank = 0;
  int64_t parameters = 0;    // parameters this rank holds
  int activation_slots = 0;  // micro-batch activation slots the schedule keeps in flight (all chunks)
  // Per model chunk: the device bytes of one micro-batch's activation slot;
  // all slots together: slot_bytes (the simulated trace's memory track).
  std::vector<int64_t> chunk_slot_bytes;
  int64_t slot_bytes = 0;
  device::MemoryStats stats;  // after construction and one training iteration, by category
  // The live activation allocations by name at that point (activation_buffers.h breaks them down).
  std::map<std::string, int64_t> activation_buffers;
  std::vector<std::string> communicators;  // whose library buffers the device holds (device.h)
  StepRecord step;                         // the kernels and collectives of that iteration, in order
  // The micro-batches its trainer stepped: all of the rank's, or fewer when
  // the pipeline's steady state was stepped once for its repeats (steady_state.h).
  int microbatches_stepped = 0;
  // Not stepped: its states and activation slots alone exceeded the dry run's abandon_above (the stats
  // are the built rank's; no step record).
  bool abandoned = false;
  // Per group name ("tp", "dp", "pp", "world", ...): the nodes this rank's group spans.
  std::vector<std::pair<std::string, int>> group_nodes;
};

struct DryRun {
  device::DeviceProfile profile;  // the job's device (its real capacity)
  int world_size = 1, tp = 1, pp = 1, dp = 1, cp = 1;
  std::string model_description;
  model::ModelConfig whole_model;    // rank 0's config: the whole model's shape and dtype
  int chunks = 1, microbatches = 1;  // model chunks per stage, micro-batches per DP rank
  int64_t global_batch = 0, seq_length = 0;
  observe::PhaseOverlap overlap;  // --tp_comm_overlap / --use_ascend_mc2
  std::vector<ClassMemory> classes;
  // SFT on a dataset that exists: the step ran the shapes of data parallel
  // rank 0's first global batch, its micro-batches' row lengths here (empty:
  // every row the model's sequence length).
  std::vector<int64_t> data_lengths;
  // Where those rows came from, for the report: "the dataset", "the dataset
  // (--dry_run_samples N of each file)" or "--dry_run_lengths".
  std::string data_source;
  // Stopped at a class whose states and slots exceeded abandon_above: the classes up to it, the last not
  // stepped (a plan's certain miss; nothing else reads an abandoned dry run).
  bool abandoned = false;
};

// What a dry step feeds: the shapes of the job's SFT data (its --dataset
// read and tokenized, as the run would batch it), or rows of the model's
// sequence length whatever the data (the preflight's and the hints'
// budget: mtrain's activation slots are sized for that length either way).
enum class DryRunData { kDataset, kShapes };

// args: validated for args.world_size ranks (config::validate). The
// vocabulary size is --vocab_size, else the --tokenizer file's; ConfigError
// when neither is given.
DryRun dry_run(const config::Args& args, DryRunData data = DryRunData::kDataset);
// The same with the job's SFT data already read (`mtrain plan` reads it once
// for all its candidates); null: every row the model's sequence length.
// repeat_steady_state false: every micro-batch stepped (tests hold the
// shortcut to this). abandon_above > 0: stop at the first class whose
// weights, gradients, optimizer state and activation slots (held together
// through the step, so its peak is above) exceed it (DryRun::abandoned).
DryRun dry_run(const config::Args& args, data::DataPipeline* data, bool repeat_steady_state = true,
               int64_t abandon_above = 0);
// The job's SFT data as the run reads it, when the job is sft with a
// --dataset whose files all exist; nullopt otherwise.
std::optional<data::DataPipeline> read_sft_data(const config::Args& args);

}  // namespace mtrain::plan
