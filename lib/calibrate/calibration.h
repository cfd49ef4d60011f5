// A device profile fitted to measured runs: each run's dry run executed once
// (plan::dry_run: the run's real step, shape-only), then re-priced with
// candidate cost constants (plan::step_time reads every constant from
// DryRun::profile.cost) inside the bounded least squares of fit.h, over the
// profile's global efficiencies: compute_efficiency,
// flash_forward_efficiency, flash_backward_efficiency, memory_efficiency,
// intra_link_efficiency, inter_link_efficiency, each in [0.05, 1]. A flash
// efficiency of 0 in the profile ("as compute_efficiency") starts at the
// compute efficiency's value and is written explicitly, so the calibrated
// profile prices what the fit priced. Leave-one-out: each run predicted by
// a fit on the others alone (same rules, so at most runs - 2 constants).
#pragma once

#include <string>
#include <vector>

#include "calibrate/fit.h"
#include "calibrate/measured_run.h"
#include "device/profile.h"
#include "plan/dry_run.h"

namespace mtrain::calibrate {

// The constants a calibration may fit, in this order.
inline constexpr const char* kFittedConstants[] = {"compute_efficiency",        "flash_forward_efficiency",
                                                   "flash_backward_efficiency", "memory_efficiency",
                                                   "intra_link_efficiency",     "inter_link_efficiency"};
inline constexpr int kConstantCount = 6;
inline constexpr double kConstantLower = 0.05, kConstantUpper = 1.0;  // every constant's bounds
double& constant_of(device::CostConstants& c, int k);
double constant_of(const device::CostConstants& c, int k);
// Fitted values are written (and priced) to 4 decimals.

struct CalibratedRun {
  MeasuredRun run;
  double before_s = 0;  // predicted with the base profile
  double after_s = 0;   // with the calibrated one
  double loo_s = 0;     // by the fit on the other runs; 0 with a single run
};

struct Calibration {
  device::DeviceProfile base;        // as loaded (flash 0 kept)
  device::CostConstants start;       // the fit's start: base.cost with flash 0 resolved
  device::CostConstants calibrated;  // start with the fitted constants (to 4 decimals, as written)
  FitResult fit;                     // on all runs (values unrounded)
  std::vector<CalibratedRun> runs;
  double before_mean = 0, after_mean = 0, loo_mean = 0;  // mean |predicted / measured - 1|; loo 0 with one run
};

// The runs' args name the profile to calibrate (ReadOptions::device_profile).
// `progress(i, n, what)` is told each dry run and fit (may be empty).
Calibration calibrate(std::vector<MeasuredRun> runs, const std::function<void(const std::string&)>& progress = nullptr);

// |predicted / measured - 1|.
double relative_error(double predicted_s, double measured_s);

}  // namespace mtrain::calibrate
