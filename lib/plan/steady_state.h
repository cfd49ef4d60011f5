// A dry step's shortcut for many equal micro-batches: the pipeline's steady
// state is stepped a few times and the rest of the step is its copy.
//
// When every micro-batch has one shape (pretraining, or rows of the model's
// sequence length), a stage's work after its warm-up repeats: the schedule
// (parallel/pipeline_schedule.h) advances by a period of P actions (one
// forward and one backward per chunk of q micro-batches: q = PP for the
// interleaved schedule, else 1), and each period runs the same kernels and
// collectives on the same memory. The dry step then runs M' < M micro-batches
// (M' = M mod q) and expand_steady_state inserts (M - M') / q copies of a
// period into the record, the micro-batch numbers moved on as the full
// schedule has them.
//
// Exact or not taken, by three checks: the full schedule's actions equal the
// short one's with the periods inserted (op, chunk and micro-batch of every
// action); in the short run two consecutive periods recorded the same work
// (kernels, collectives and ring waits, relative to their period); and the
// device's memory at the three period boundaries is the same, with no peak
// raised by the second period (so no copy raises one). When a check fails,
// the caller steps every micro-batch.
#pragma once

#include <optional>
#include <vector>

#include "device/device.h"
#include "observe/step_record.h"
#include "parallel/pipeline_schedule.h"

namespace mtrain::plan {

struct SteadyStatePlan {
  int microbatches = 0;         // M': what the dry step runs
  int full_microbatches = 0;    // M: what the step has
  int period_start = 0;         // the action where the first of the two compared periods begins
  int period_actions = 0;       // P
  int period_microbatches = 0;  // q: how far one period moves the micro-batch numbers
  int copies() const { return (full_microbatches - microbatches) / period_microbatches; }
};

// The shortcut for a stage's pipeline of `full.microbatches` equal
// micro-batches, or nullopt when it would step as many (few micro-batches,
// or a schedule whose actions do not repeat so).
std::optional<SteadyStatePlan> plan_steady_state(const parallel::PipelineShape& full);

// The record of the full step from the short step's record and the device's
// memory when each of its phases began; nullopt when the short run's two
// periods differ in work or memory.
std::optional<observe::StepRecord> expand_steady_state(const observe::StepRecord& short_run,
                                                       const std::vector<device::MemoryStats>& at_phase_begin,
                                                       const SteadyStatePlan& plan);

}  // namespace mtrain::plan
