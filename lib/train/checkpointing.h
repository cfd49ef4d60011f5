// Checkpointing of a training run: what a rank contributes to a sharded
// checkpoint (lib/checkpoint/sharded_checkpoint.h) and how a run starts from
// one, under any TP / PP / DP layout.
//
// Tensors (Megatron-core names, full unsharded shapes):
//   <param name>                     the weights; each rank writes its TP block
//                                    (SwiGLU's fc1 as two blocks, gate and up)
//   optimizer.<state>/<param name>   exp_avg, exp_avg_sq, momentum_buffer,
//                                    fp32_param (bf16/fp16 master): the same
//                                    blocks. Under the distributed optimizer
//                                    the DP shards are all-gathered first (as
//                                    Megatron gathers distrib_optim state), so
//                                    a checkpoint does not depend on DP size
//                                    or on the optimizer being sharded.
// Exactly one rank writes each block: DP replicas take turns by parameter
// (spreading the bytes), TP-replicated tensors come from TP rank 0, and the
// last pipeline stage's copy of tied embeddings is not saved (it equals the
// word embeddings; a load fills it from them).
//
// State JSON (the manifest's "state"): iteration, consumed samples, the loop
// counters, data-loader position, LR-schedule position (optimizer steps),
// optimizer step count, loss-scaler state, the seed (mtrain's dropout is
// counter-based: seed + iteration + micro-batch fix every mask, so the seed
// is the whole RNG state), the model shape (checkpoint/model_meta.h) and the
// run's arguments, and the LR / weight-decay schedule (checkpoint_schedule.h),
// which a resume must match unless told which one wins.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "checkpoint/model_meta.h"
#include "checkpoint/sharded_checkpoint.h"
#include "common/file_system.h"
#include "common/progress.h"
#include "config/args.h"
#include "model/gpt.h"
#include "nlohmann/json.hpp"
#include "observe/hooks.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "parallel/parallel_state.h"
#include "train/checkpoint_schedule.h"
#include "train/trainer.h"
#include "train/watchdog.h"

namespace mtrain::train {

// The pieces of one rank's training state a checkpoint holds.
struct TrainingState {
  model::GptModel& model;
  optim::Optimizer& optimizer;
  optim::GradScaler* scaler;  // null: no loss scaling
  data::BatchSource& data;
  parallel::ParallelState& parallel;
  int64_t bucket_elems = 0;          // the DP buckets (distributed optimizer shards)
  ProgressSink* progress = nullptr;  // loading's and saving's progress line (the rank that shows it)
};

struct SaveSettings {
  std::string dir;
  int64_t interval = 0;  // save every this many iterations (0: only at the end)
  bool optim = true;     // optimizer, scheduler and scaler state
  bool rng = true;
  int keep_last = 0;  // 0: keep all
  mode_t dir_mode = kDefaultDirMode;
  mode_t file_mode = kDefaultFileMode;
  bool continue_on_error = false;  // --on_save_error continue
  double timeout_seconds = 600;    // a save stalled this long ends the run (exit 5)
  uint64_t seed = 42;              // the run's RNG state
  std::string args_json;           // the run's arguments, recorded in the state
  // A LoRA run (frozen parameters): the base reference (base_reference.h);
  // then only trainable tensors are saved. Empty: a full checkpoint.
  std::string base_json;
  ParamSchedule schedule;  // recorded with the optimizer state
};
SaveSettings save_settings(const config::Args& args);

// The model shape this rank's model records (padded vocabulary included).
checkpoint::ModelMeta model_meta(const model::ModelConfig& c);

// Saves iteration `counters.iteration`: every rank calls it collectively.
// Returns what the save did; throws CheckpointError (the same on every rank).
checkpoint::SaveResult save_training_checkpoint(FileSystem& fs, const SaveSettings& s, TrainingState& t,
                                                const TrainerCounters& counters);

struct LoadSettings {
  std::string dir;
  std::optional<int64_t> iteration;  // --ckpt_step; default: the tracker's
  bool finetune = false;             // weights only, iteration 0
  bool optim = true;                 // --no_load_optim: false
  bool rng = true;                   // --no_load_rng: false
  bool exit_on_missing = false;
  uint64_t seed = 42;      // --seed: a randomly initialised LoRA base must match it
  ParamSchedule schedule;  // this run's, checked against the checkpoint's
  ScheduleChoice schedule_choice = ScheduleChoice::kCheck;
};
LoadSettings load_settings(const config::Args& args);

// What a load restored beyond the tensors.
struct Resumed {
  TrainerCounters counters;
  std::optional<uint64_t> seed;  // the checkpoint's RNG state (unless --no_load_rng / --finetune)
  // The schedule to train on when the optimizer state was loaded: this run's,
  // or the checkpoint's with --use_checkpoint_opt_param_scheduler.
  std::optional<ParamSchedule> schedule;
  nlohmann::json base;  // the base reference a LoRA run from here saves (base_reference.h)
};

// Loads the weights (and, unless finetuning, the optimizer, scaler, data
// position) into `t`. Returns nullopt when the directory holds no checkpoint
// and exit_on_missing is off (Megatron then starts from random weights).
// Throws CheckpointError before touching any state when the checkpoint is
// damaged, its model shape differs (naming both values) or, when the
// optimizer state is loaded, its LR / weight-decay schedule differs.
std::optional<Resumed> load_training_checkpoint(FileSystem& fs, const LoadSettings& s, TrainingState& t);

// Starting weights from any source (a checkpoint, a Hugging Face directory):
// this rank's blocks of every parameter; the optimizer's master copy follows.
void load_model_weights(const checkpoint::WeightSource& src, TrainingState& t);

// Inference (`mtrain infer`): this rank's blocks of every parameter from any
// source, checked like load_model_weights, without an optimizer.
void load_inference_weights(const checkpoint::WeightSource& src, model::GptModel& model);
// `--model <hf_dir>`: the starting weights from a Hugging Face directory
// (checkpoint/hf_model_dir.h); its shape must be this model's.
void load_hf_model(FileSystem& fs, const std::string& dir, TrainingState& t);

// Saves every `interval` iterations (after that iteration's evaluation, as
// Megatron does) and once at the end of training, printing Megatron's lines
// on rank 0. A failed save stops the run (CheckpointError, exit 5) or, with
// continue_on_error, is reported and training goes on; every rank decides
// alike because save_checkpoint agrees on the failure.
class CheckpointHook : public observe::TrainHook {
 public:
  CheckpointHook(FileSystem& fs, SaveSettings s, TrainingState t, const Trainer& trainer,
                 std::shared_ptr<Watchdog> watchdog);
  void on_train_begin(const observe::TrainInfo& info) override;
  void on_iteration_end(int64_t iteration) override;
  bool reads_params(int64_t iteration) const override { return s_.interval > 0 && iteration % s_.interval == 0; }
  void on_train_end(const observe::TrainInfo& info) override;

 private:
  void save();

  FileSystem& fs_;
  SaveSettings s_;
  TrainingState t_;
  const Trainer& trainer_;
  std::shared_ptr<Watchdog> watchdog_;
  int64_t last_saved_ = -1;
};

}  // namespace mtrain::train
