// The bounded least squares on planted problems with a known answer: residuals linear in ln p,
// r = A (ln p - ln p*), so the minimum is p* when it is inside the bounds, a bound otherwise.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "calibrate/fit.h"

namespace mtrain::calibrate {
namespace {

// r_i(p) = sum_j a[i][j] (ln p_j - ln truth_j).
Residuals planted(std::vector<std::vector<double>> a, std::vector<double> truth) {
  return [a, truth](const std::vector<double>& p) {
    std::vector<double> r(a.size(), 0.0);
    for (size_t i = 0; i < a.size(); ++i)
      for (size_t j = 0; j < p.size(); ++j) r[i] += a[i][j] * (std::log(p[j]) - std::log(truth[j]));
    return r;
  };
}

std::vector<FitParameter> params(const std::vector<double>& start) {
  std::vector<FitParameter> out;
  for (size_t j = 0; j < start.size(); ++j) out.push_back({std::to_string(j), start[j], 0.05, 1.0});
  return out;
}

// BOBYQA stops when a step changes every ln p by less than 1e-7 (fit.cc): the answer to a few times that.
constexpr double kTolerance = 1e-5;

TEST(Fit, RecoversAPlantedAnswerAndLeavesAnInsensitiveConstant) {
  // Four runs, three constants; the third moves no run (a column of zeros): not identified.
  const std::vector<std::vector<double>> a = {{0.9, 0.1, 0}, {0.7, 0.3, 0}, {0.5, 0.4, 0}, {0.8, 0.05, 0}};
  const FitResult f = fit_constants(params({0.8, 0.8, 0.5}), planted(a, {0.6, 0.3, 0.9}));
  EXPECT_EQ(f.status[0], FitStatus::kFitted);
  EXPECT_EQ(f.status[1], FitStatus::kFitted);
  EXPECT_EQ(f.status[2], FitStatus::kNotIdentified);
  EXPECT_NEAR(f.values[0], 0.6, 0.6 * kTolerance);
  EXPECT_NEAR(f.values[1], 0.3, 0.3 * kTolerance);
  EXPECT_EQ(f.values[2], 0.5);              // its start, exactly
  EXPECT_NEAR(f.elasticity[0], 0.9, 1e-9);  // linear in ln p: the differences are exact
  EXPECT_NEAR(f.elasticity[1], 0.4, 1e-9);
  EXPECT_EQ(f.elasticity[2], 0.0);
  EXPECT_LT(f.cost, 1e-12);
  EXPECT_GT(f.start_cost, 0.1);
}

TEST(Fit, RespectsTheBounds) {
  // The planted p0 = 1.6 is above the bound 1: the fit stops on it; p1 (independent run) is still found.
  const std::vector<std::vector<double>> a = {{1, 0}, {0, 1}, {1, 1}};
  const FitResult f = fit_constants(params({0.5, 0.5}), planted(a, {1.6, 0.2}));
  EXPECT_LE(f.values[0], 1.0);  // never outside; on it to the optimizer's tolerance
  EXPECT_NEAR(f.values[0], 1.0, kTolerance);
  // With p0 at 1: minimize (ln p1 - ln 0.2)^2 + (ln(1/1.6) + ln p1 - ln 0.2)^2 -> ln p1 = ln 0.2 + ln(1.6) / 2.
  EXPECT_NEAR(f.values[1], 0.2 * std::sqrt(1.6), 0.2 * kTolerance);
  // And below the lower bound.
  const FitResult g = fit_constants(params({0.5, 0.5}), planted(a, {0.01, 0.2}));
  EXPECT_GE(g.values[0], 0.05);
  EXPECT_NEAR(g.values[0], 0.05, 0.05 * kTolerance);
}

TEST(Fit, AConstantThatMimicsAFittedOneIsNotSeparable) {
  // Columns 0 and 1 are proportional: only their combination is seen; the more sensitive is fitted.
  const std::vector<std::vector<double>> a = {{0.8, 0.4}, {0.6, 0.3}, {0.2, 0.1}};
  const FitResult f = fit_constants(params({0.5, 0.5}), planted(a, {0.4, 0.5}));
  EXPECT_EQ(f.status[0], FitStatus::kFitted);
  EXPECT_EQ(f.status[1], FitStatus::kNotSeparable);
  EXPECT_EQ(f.values[1], 0.5);
  EXPECT_NEAR(f.values[0], 0.4, 0.4 * kTolerance);
}

TEST(Fit, FitsAtMostOneFewerConstantThanRuns) {
  // Two runs, three independent constants: one fitted (the most sensitive), the others held.
  const std::vector<std::vector<double>> a = {{0.2, 0.9, 0.1}, {0.1, 0.5, 0.6}};
  const FitResult f = fit_constants(params({0.5, 0.5, 0.5}), planted(a, {0.3, 0.7, 0.4}));
  EXPECT_EQ(f.status[1], FitStatus::kFitted);
  EXPECT_EQ(f.status[0], FitStatus::kHeld);
  EXPECT_EQ(f.status[2], FitStatus::kHeld);
  EXPECT_EQ(f.values[0], 0.5);
  EXPECT_EQ(f.values[2], 0.5);
  // max_free given: all three (an exactly determined problem needs three runs; two leave a valley).
  FitOptions o;
  o.max_free = 3;
  const FitResult g = fit_constants(params({0.5, 0.5, 0.5}), planted(a, {0.3, 0.7, 0.4}), o);
  int fitted = 0;
  for (FitStatus s : g.status) fitted += s == FitStatus::kFitted;
  EXPECT_EQ(fitted, 2);  // the third column lies in the span of two (two runs): not separable
  EXPECT_LT(g.cost, 1e-12);
}

TEST(Fit, OneRunFitsOneConstantExactly) {
  const FitResult f = fit_constants(params({0.5}), planted({{0.7}}, {0.35}));
  EXPECT_EQ(f.status[0], FitStatus::kFitted);
  EXPECT_NEAR(f.values[0], 0.35, 0.35 * kTolerance);
}

}  // namespace
}  // namespace mtrain::calibrate
