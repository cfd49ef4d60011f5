// run_training: everything `mtrain sft` / `mtrain pt` does after the command
// line is parsed: threads, output directory and args.json, tokenizer and
// data, the simulated device, model, optimizer, schedule and hooks, the
// training loop, and the closing sample answers. Returns the exit code.
#pragma once

#include <memory>
#include <vector>

#include "common/progress.h"
#include "config/args.h"
#include "device/cpu_affinity.h"
#include "device/device.h"
#include "observe/hooks.h"
#include "parallel/parallel_state.h"

namespace mtrain::train {

// Where this process runs: one rank of a launch, or the only process.
struct RunContext {
  parallel::ParallelState* parallel = nullptr;  // null: a world of one (no MPI)
  int device_index = 0;                         // the simulated NPU this rank owns
  int local_ranks = 1;                          // ranks sharing this node's cores
  int node = 0;                                 // this rank's node (NODE_RANK), for error messages and npu-smi
  int affinity_mode = 0;                        // CPU_AFFINITY_CONF's mode (0 = no binding)
  device::AffinityPlan affinity;                // this rank's cores when affinity_mode != 0
  // When set, receives this rank's device accounting at the end of training
  // (the recorded peak a dry run of the same flags must predict).
  device::MemoryStats* memory_out = nullptr;
  // Extra step hooks (e.g. a recorder a test compares with a dry run).
  std::vector<std::shared_ptr<observe::TrainHook>> hooks;
  // Where the progress line's states go (common/progress.h; the last rank
  // uses it unless --progress false); null: stdout is nobody's terminal.
  ProgressSink* progress = nullptr;
};

int run_training(const config::Args& args, const RunContext& ctx = {});

}  // namespace mtrain::train
