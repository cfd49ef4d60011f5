// The memory part of the dry-run report: for each rank class (pipeline
// stage, and DP rank under the distributed optimizer) the peak HBM by
// category, the allocator's reserve (reserved minus allocated: the caching
// allocator's whole-block rounding), capacity, headroom and FITS / DOES NOT
// FIT. A plan that does not fit is an OutOfMemoryError (exit 6) naming the
// stage, the dominant category, the shortfall, and the cheapest change that
// was dry-run and found to fit.
#pragma once

#include <string>
#include <vector>

#include "plan/dry_run.h"

namespace mtrain::plan {

// Peak bytes of a class on the device (the allocator's peak reserved and
// what the runtime holds beside it): what must fit in HBM.
int64_t class_peak(const ClassMemory& c);
// The class's peak on the device if MoE routing collapsed onto its experts:
// class_peak plus the expert buffers' contingent (device.h) and the
// fragmentation the allocator would add to it. class_peak without MoE.
int64_t collapse_peak(const DryRun& r, const ClassMemory& c);
// The largest class_peak of the plan's classes.
int64_t plan_peak(const DryRun& r);
bool plan_fits(const DryRun& r);

// Classes of one stage that hold the same parameters (the distributed
// optimizer's shards, which padding can make differ by a few bytes) are
// reported as one group showing the largest.
struct ReportGroup {
  const ClassMemory* shown = nullptr;
  std::vector<int> ranks;  // ascending
  int simulated = 0;       // classes in the group
};
std::vector<ReportGroup> report_groups(const DryRun& r);

// The report text (every class, fitting or not).
std::string memory_report(const DryRun& r);

// Throws OutOfMemoryError when `r` (the dry run of `args`) does not fit.
// The hint is the fastest fitting change (by simulated step time) of one
// knob (distributed optimizer, recompute, a smaller micro-batch, 2x / 4x TP
// or PP), else of two, three ... knobs together at their strongest, with
// its peak; or that none fits on this many devices.
void require_fit(const DryRun& r, const config::Args& args);

// The host RAM a real run of `r` needs on one machine: the fp32 storage of
// every tensor (the peak, Device's max_host) of the ranks `local_ranks`.
int64_t host_need(const DryRun& r, const std::vector<int>& local_ranks);
// Throws OutOfMemoryError saying how much the host needs and has when the
// ranks' need exceeds `available` (bytes; negative: unknown, no check).
void require_host_fit(const DryRun& r, const std::vector<int>& local_ranks, int64_t available);

}  // namespace mtrain::plan
