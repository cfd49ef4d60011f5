// One training iteration of a dry run's rank, shape-only: the real Trainer
// (pipeline schedule, model, TP layers, grad sync, clipping, optimizer) runs
// under profiler::ShapeOnlyScope on the rank's meta model and MetaComm, fed
// micro-batches that have a shape (--micro_batch_size x the model's
// sequence length, or the shapes of the rank's real SFT batches) but no token ids. Kernels report their regions and
// return; collectives report and move nothing; the optimizer and the grad
// norm do no math (the loss and grad norm of this step are not numbers).
#pragma once

#include <optional>
#include <vector>

#include "config/args.h"
#include "model/gpt.h"
#include "observe/step_record.h"
#include "parallel/parallel_state.h"
#include "train/rank_build.h"

namespace mtrain::plan {

// The recorder and its cost live in lib/train (a real run's --log_throughput
// uses them too); the planner speaks of them in its own namespace.
using observe::CommRecord;
using observe::KernelRecord;
using observe::OverlappedComm;
using observe::PhaseRecord;
using observe::record_cost;
using observe::RecordCost;
using observe::StepRecord;
using observe::StepRecorder;

// What a dry step executed, in order, and the device's accounting while the
// trainer still stands (its pipeline receive buffers included, as a real
// run's accounting at its end includes them).
struct DryStep {
  StepRecord record;
  device::MemoryStats stats;
  // The micro-batches the trainer stepped: all of them, or fewer when the
  // pipeline's steady state was stepped once for its repeats (steady_state.h).
  int microbatches_stepped = 0;
};

// Runs iteration 1 of the rank `state` stands for. Allocations go through the
// model's Device as in a real step, so its peak includes the step's
// transient buffers.
// data: the rank's real batches (an SFT dataset read by the dry run): the
// step takes the shape of each (rows x the longest row), no token ids; null:
// every micro-batch --micro_batch_size rows of the model's sequence length.
// lengths_out (if set): the T of each micro-batch of data the step ran, in order.
// repeat_steady_state: with micro-batches of one shape (no data), step the
// pipeline's steady state once for its repeats (steady_state.h); nullopt
// when its checks fail, and the rank must be built again and stepped whole.
std::optional<DryStep> run_dry_step(const config::Args& args, model::GptModel& model, train::TrainerSetup& setup,
                                    parallel::ParallelState& state, train::TrainerOptions to,
                                    data::BatchSource* data = nullptr, std::vector<int64_t>* lengths_out = nullptr,
                                    bool repeat_steady_state = false);

}  // namespace mtrain::plan
