// The bounded least squares of `mtrain calibrate`: a few constants p_j, each
// in [lower_j, upper_j], chosen to minimize sum_i r_i(p)^2, where r_i is
// run i's log(predicted / measured) step time. The model is a black box
// (the dry run re-priced), piecewise smooth in p (a kernel switches between
// its compute and memory bound), so the optimizer is derivative-free:
// NLopt's BOBYQA (Powell's bound-constrained quadratic model), over ln p.
//
// Which constants are fitted (the rest keep their starting value):
// 1. Sensitivity: the elasticity J_ij = d r_i / d ln p_j at the start, by
//    central differences (a relative step of 1e-3). A constant whose largest
//    |J_ij| over the runs is below `min_elasticity` is not identified by these
//    runs (a 1 % change of it moves no prediction by 0.01 %).
// 2. At most `max_free` constants (default: one fewer than the runs, so the
//    fit keeps a residual to show; one run fixes one constant), picked by
//    pivoted Gram-Schmidt on J's columns: the most sensitive first, then the
//    one with the largest effect that the picked ones cannot mimic. A constant
//    whose remaining effect is below min_elasticity is not separable from the
//    picked ones; one left when max_free is reached is held.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace mtrain::calibrate {

struct FitParameter {
  std::string name;
  double start = 0;  // the profile's value
  double lower = 0.05, upper = 1.0;
};

enum class FitStatus { kFitted, kNotIdentified, kNotSeparable, kHeld };
// "fitted", "not identified by these runs", "not separable from the fitted ones", "held (more constants than runs)".
const char* fit_status_text(FitStatus s);

struct FitOptions {
  double min_elasticity = 0.01;
  int max_free = -1;  // -1: max(1, runs - 1)
};

// r(p): one residual per run, for the constants in FitParameter order.
using Residuals = std::function<std::vector<double>(const std::vector<double>& p)>;

struct FitResult {
  std::vector<double> values;       // per parameter: fitted, or its start
  std::vector<FitStatus> status;    // per parameter
  std::vector<double> elasticity;   // per parameter: max_i |d r_i / d ln p_j| at the start
  std::vector<double> residuals;    // per run, at `values`
  double start_cost = 0, cost = 0;  // sum of squared residuals at the start and at `values`
  int evaluations = 0;              // of r
};

// Throws Error(kInternal) when the optimizer fails (not when it stops at a bound).
FitResult fit_constants(const std::vector<FitParameter>& params, const Residuals& r, const FitOptions& options = {});

}  // namespace mtrain::calibrate
