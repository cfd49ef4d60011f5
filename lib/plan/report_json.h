// `--dry_run --json`: the dry run's whole report as one JSON document, from
// the same DryRun and StepTime the text report prints (memory_report.h,
// step_time.h). Per pipeline stage: memory by category (bytes) with the
// peaks, capacity, headroom and verdict of each reported rank group, and the
// step time split into lines that add up to the step with nothing counted
// twice:
//   step_s = compute_s + host_wait_s + contention_s + tp_comm_s + cp_comm_s + ep_comm_s + dp_exposed_s
//            + other_comm_s + optimizer_s + idle_s
// (the micro-batch collectives' exposed time by line; dp_exposed_s the DP
// communication on the critical path; idle_s the rest of the step: pipeline
// bubble and waits for other stages). Hidden communication is reported
// beside it (dp_hidden_s, phase_hidden_s) and is not part of the sum.
// `timeline`: the simulated schedule's spans (step_time.h TimelineSpan: each
// micro-batch's forward / backward per chunk, the tail, the optimizer, the
// DP stream's buckets), as --profile with --dry_run draws them.
#pragma once

#include <nlohmann/json.hpp>

#include "plan/dry_run.h"
#include "plan/step_time.h"

namespace mtrain::plan {

nlohmann::json dry_run_json(const DryRun& r, const StepTime& t);

}  // namespace mtrain::plan
