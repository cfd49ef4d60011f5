// The fit of a profile's efficiencies to measured runs, and leave-one-out (calibration.h).
#include "calibrate/calibration.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

#include "common/errors.h"
#include "plan/step_time.h"

namespace mtrain::calibrate {

namespace {

constexpr double device::CostConstants::*kMembers[kConstantCount] = {
    &device::CostConstants::compute_efficiency,        &device::CostConstants::flash_forward_efficiency,
    &device::CostConstants::flash_backward_efficiency, &device::CostConstants::memory_efficiency,
    &device::CostConstants::intra_link_efficiency,     &device::CostConstants::inter_link_efficiency};

// The step time of `dry` priced with `c`.
double priced_step(plan::DryRun& dry, const device::CostConstants& c) {
  dry.profile.cost = c;
  return plan::step_time(dry).step_s;
}

device::CostConstants with_values(device::CostConstants c, const std::vector<double>& p) {
  for (int k = 0; k < kConstantCount; ++k) constant_of(c, k) = p[k];
  return c;
}

// Fits `start`'s constants to the runs `use` (indices into dries / measured).
FitResult fit_on(std::vector<plan::DryRun>& dries, const std::vector<double>& measured, const std::vector<size_t>& use,
                 const device::CostConstants& start) {
  std::vector<FitParameter> params;
  for (int k = 0; k < kConstantCount; ++k)
    params.push_back({kFittedConstants[k], std::clamp(constant_of(start, k), kConstantLower, kConstantUpper),
                      kConstantLower, kConstantUpper});
  const Residuals r = [&](const std::vector<double>& p) {
    const device::CostConstants c = with_values(start, p);
    std::vector<double> out;
    for (size_t i : use) out.push_back(std::log(priced_step(dries[i], c) / measured[i]));
    return out;
  };
  return fit_constants(params, r);
}

device::CostConstants rounded(const device::CostConstants& start, const FitResult& f) {
  device::CostConstants c = start;
  for (int k = 0; k < kConstantCount; ++k)
    if (f.status[k] == FitStatus::kFitted)
      constant_of(c, k) = std::strtod(fmt::format("{:.4f}", f.values[k]).c_str(), nullptr);  // as the file reads
  return c;
}

}  // namespace

double& constant_of(device::CostConstants& c, int k) { return c.*kMembers[k]; }
double constant_of(const device::CostConstants& c, int k) { return c.*kMembers[k]; }

double relative_error(double predicted_s, double measured_s) { return std::abs(predicted_s / measured_s - 1.0); }

Calibration calibrate(std::vector<MeasuredRun> runs, const std::function<void(const std::string&)>& progress) {
  if (runs.empty()) throw UsageError("mtrain calibrate: no runs", "give --runs DIR_OR_LOG ...");
  const auto tell = [&](const std::string& what) {
    if (progress) progress(what);
  };
  Calibration cal;
  std::vector<plan::DryRun> dries;
  std::vector<double> measured;
  for (size_t i = 0; i < runs.size(); ++i) {
    tell(fmt::format("dry run {}/{}: {}", i + 1, runs.size(), runs[i].source));
    dries.push_back(plan::dry_run(runs[i].args));
    measured.push_back(runs[i].measured_s);
    if (i > 0 && dries[i].profile.name != dries[0].profile.name)
      throw ConfigError(fmt::format("{} is priced on {} and {} on {}", runs[0].source, dries[0].profile.name,
                                    runs[i].source, dries[i].profile.name),
                        "calibrate one device profile at a time (--device_profile)");
  }
  cal.base = dries[0].profile;
  cal.start = cal.base.cost;
  for (int k : {1, 2})  // a flash efficiency of 0: as compute_efficiency
    if (constant_of(cal.start, k) == 0) constant_of(cal.start, k) = cal.start.compute_efficiency;

  std::vector<size_t> all(runs.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  tell(fmt::format("fit on {} runs", runs.size()));
  cal.fit = fit_on(dries, measured, all, cal.start);
  cal.calibrated = rounded(cal.start, cal.fit);
  for (size_t i = 0; i < runs.size(); ++i) {
    CalibratedRun c{std::move(runs[i])};
    c.before_s = priced_step(dries[i], cal.base.cost);
    c.after_s = priced_step(dries[i], cal.calibrated);
    cal.before_mean += relative_error(c.before_s, c.run.measured_s) / static_cast<double>(all.size());
    cal.after_mean += relative_error(c.after_s, c.run.measured_s) / static_cast<double>(all.size());
    cal.runs.push_back(std::move(c));
  }
  if (runs.size() < 2) return cal;
  for (size_t held = 0; held < all.size(); ++held) {
    tell(fmt::format("leave-one-out {}/{}", held + 1, all.size()));
    std::vector<size_t> others;
    for (size_t i : all)
      if (i != held) others.push_back(i);
    const FitResult f = fit_on(dries, measured, others, cal.start);
    cal.runs[held].loo_s = priced_step(dries[held], rounded(cal.start, f));
    cal.loo_mean += relative_error(cal.runs[held].loo_s, measured[held]) / static_cast<double>(all.size());
  }
  return cal;
}

}  // namespace mtrain::calibrate
