// The construction of one rank's training objects, shared by a real run
// (run.cc) and a shape-only dry run (lib/plan): the device profile, this
// rank's model share, the optimizer (sharded under the distributed
// optimizer), LR schedule and loss scaler. With meta = true the same objects
// are built with meta tensors: every byte is accounted on the Device exactly
// as in a real run, but no host storage is allocated.
#pragma once

#include <memory>

#include "config/args.h"
#include "data/data_pipeline.h"
#include "device/device.h"
#include "model/gpt.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "parallel/parallel_state.h"
#include "train/trainer.h"

namespace mtrain::train {

// The process grid of validated flags (world size, TP, PP, CP, EP, rank order).
parallel::ProcessGrid process_grid_from_args(const config::Args& args);

// The simulated NPU of --device_profile.
device::DeviceProfile device_profile(const config::Args& args);
TrainerOptions trainer_options(const config::Args& args);
// This rank's share of the model: TP rank, pipeline chunks and the
// activation slots the schedule keeps in flight (args.vocab_size must be set).
model::ModelConfig rank_model_config(const config::Args& args, const parallel::RankCoords& rc);
// This rank's share of the data: its DP rank, and rows padded so that they
// split into the 2*CP chunks of context parallelism, each a whole number of
// sequence-parallel shards.
data::DataShard data_shard(const model::ModelConfig& mc, const parallel::ParallelState& state);
// The model of this rank, its flat buffers padded for the DP buckets.
std::unique_ptr<model::GptModel> build_rank_model(const config::Args& args, device::Device& dev,
                                                  parallel::ParallelState& state, const TrainerOptions& to, bool meta);

// The optimizer (sharded under the distributed optimizer), LR schedule and
// fp16/bf16 loss scaler of one rank.
struct TrainerSetup {
  optim::Optimizer optimizer;
  optim::LrScheduler scheduler;
  std::unique_ptr<optim::GradScaler> scaler;

  TrainerSetup(const config::Args& args, model::GptModel& model, device::Device& dev,
               const parallel::ParallelState& state, const TrainerOptions& to, bool meta = false);
};

}  // namespace mtrain::train
