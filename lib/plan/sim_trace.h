// `--profile` with `--dry_run`: the simulated step as a Chrome trace
// (chrome://tracing, Perfetto): one row per pipeline stage on one screen,
// each forward / backward of a micro-batch and chunk where the device clock
// places it, the gaps between them the bubble, the blocking communication,
// the optimizer step and the param all-gather after the last backward;
// overlapped DP communication (--overlap_grad_reduce, --overlap_param_gather)
// on a row of its own under the stages, beside the backward it overlaps;
// and per stage a memory counter track (the device's bytes over the step:
// each micro-batch chunk's activations from its forward to its backward).
// Times are the cost model's, not measured.
#pragma once

#include <string>

#include "plan/dry_run.h"
#include "plan/step_time.h"

namespace mtrain::plan {

// The trace document (JSON text).
std::string simulated_trace(const DryRun& r, const StepTime& t);

// Writes it to <dir>/simulated_trace.json (atomically) and returns the path.
std::string write_simulated_trace(const DryRun& r, const StepTime& t, const std::string& dir);

}  // namespace mtrain::plan
