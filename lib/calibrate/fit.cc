// Bounded least squares with NLopt's BOBYQA over the identified constants (fit.h).
#include "calibrate/fit.h"

#include <fmt/format.h>
#include <nlopt.h>

#include <algorithm>
#include <cmath>

#include "common/errors.h"

namespace mtrain::calibrate {

namespace {

double sum_squares(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return s;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// J's column j: d r / d ln p_j by central differences (one-sided at a bound).
std::vector<double> elasticity_column(const std::vector<FitParameter>& params, size_t j, const Residuals& r,
                                      int& evaluations) {
  constexpr double kStep = 1e-3;
  std::vector<double> up(params.size()), down(params.size());
  for (size_t k = 0; k < params.size(); ++k) up[k] = down[k] = params[k].start;
  const double p = params[j].start;
  const double hi = std::min(params[j].upper, p * (1 + kStep)), lo = std::max(params[j].lower, p * (1 - kStep));
  up[j] = hi;
  down[j] = lo;
  const std::vector<double> ru = r(up), rd = r(down);
  evaluations += 2;
  std::vector<double> col(ru.size());
  const double dlog = std::log(hi) - std::log(lo);
  for (size_t i = 0; i < ru.size(); ++i) col[i] = dlog > 0 ? (ru[i] - rd[i]) / dlog : 0.0;
  return col;
}

// Pivoted Gram-Schmidt: the free constants' indices, the status of the rest set.
std::vector<size_t> pick_free(const std::vector<std::vector<double>>& cols, std::vector<FitStatus>& status,
                              double min_elasticity, int max_free) {
  std::vector<std::vector<double>> rest = cols;  // columns less their projection on the picked span
  std::vector<size_t> picked;
  std::vector<bool> open(cols.size());
  for (size_t j = 0; j < cols.size(); ++j) open[j] = status[j] != FitStatus::kNotIdentified;
  for (;;) {
    size_t best = cols.size();
    for (size_t j = 0; j < cols.size(); ++j)
      if (open[j] && (best == cols.size() || sum_squares(rest[j]) > sum_squares(rest[best]))) best = j;
    if (best == cols.size()) break;
    if (max_abs(rest[best]) < min_elasticity) {  // what is left of every open column: mimicked by the picked
      for (size_t j = 0; j < cols.size(); ++j)
        if (open[j]) status[j] = FitStatus::kNotSeparable;
      break;
    }
    if (static_cast<int>(picked.size()) == max_free) {
      for (size_t j = 0; j < cols.size(); ++j)
        if (open[j]) status[j] = FitStatus::kHeld;
      break;
    }
    open[best] = false;
    picked.push_back(best);
    std::vector<double> q = rest[best];
    const double norm = std::sqrt(sum_squares(q));
    for (double& x : q) x /= norm;
    for (size_t j = 0; j < cols.size(); ++j) {
      if (!open[j]) continue;
      double dot = 0;
      for (size_t i = 0; i < q.size(); ++i) dot += q[i] * rest[j][i];
      for (size_t i = 0; i < q.size(); ++i) rest[j][i] -= dot * q[i];
    }
  }
  std::sort(picked.begin(), picked.end());
  return picked;
}

struct Objective {
  const std::vector<FitParameter>* params;
  const std::vector<size_t>* free;
  const Residuals* r;
  int evaluations = 0;
  // x: ln of the free constants.
  std::vector<double> full(const double* x) const {
    std::vector<double> p(params->size());
    for (size_t k = 0; k < p.size(); ++k) p[k] = (*params)[k].start;
    for (size_t f = 0; f < free->size(); ++f) {  // exp(ln b) may miss the bound b by an ulp: clamped
      const FitParameter& q = (*params)[(*free)[f]];
      p[(*free)[f]] = std::clamp(std::exp(x[f]), q.lower, q.upper);
    }
    return p;
  }
};

double objective(unsigned, const double* x, double*, void* data) {
  auto* o = static_cast<Objective*>(data);
  ++o->evaluations;
  return sum_squares((*o->r)(o->full(x)));
}

}  // namespace

const char* fit_status_text(FitStatus s) {
  switch (s) {
    case FitStatus::kFitted:
      return "fitted";
    case FitStatus::kNotIdentified:
      return "not identified by these runs";
    case FitStatus::kNotSeparable:
      return "not separable from the fitted ones";
    case FitStatus::kHeld:
      return "held (more constants than the runs can fix)";
  }
  return "?";
}

FitResult fit_constants(const std::vector<FitParameter>& params, const Residuals& r, const FitOptions& options) {
  FitResult out;
  std::vector<double> start(params.size());
  for (size_t k = 0; k < params.size(); ++k) {
    if (!(params[k].lower > 0 && params[k].lower <= params[k].start && params[k].start <= params[k].upper))
      throw Error(ExitCode::kInternal, fmt::format("fit: {} starts at {} outside its bounds [{}, {}]", params[k].name,
                                                   params[k].start, params[k].lower, params[k].upper));
    start[k] = params[k].start;
  }
  const std::vector<double> r0 = r(start);
  out.evaluations = 1;
  out.start_cost = sum_squares(r0);
  std::vector<std::vector<double>> cols;
  out.status.assign(params.size(), FitStatus::kFitted);
  for (size_t j = 0; j < params.size(); ++j) {
    cols.push_back(elasticity_column(params, j, r, out.evaluations));
    out.elasticity.push_back(max_abs(cols.back()));
    if (out.elasticity.back() < options.min_elasticity) out.status[j] = FitStatus::kNotIdentified;
  }
  const int max_free = options.max_free >= 0 ? options.max_free : std::max(1, static_cast<int>(r0.size()) - 1);
  const std::vector<size_t> free = pick_free(cols, out.status, options.min_elasticity, max_free);
  out.values = start;
  out.residuals = r0;
  out.cost = out.start_cost;
  if (free.empty()) return out;

  Objective o{&params, &free, &r};
  const unsigned n = static_cast<unsigned>(free.size());
  std::vector<double> x(n), lb(n), ub(n), step(n);
  for (unsigned f = 0; f < n; ++f) {
    const FitParameter& p = params[free[f]];
    x[f] = std::log(p.start);
    lb[f] = std::log(p.lower);
    ub[f] = std::log(p.upper);
    step[f] = std::min(0.25, 0.25 * (ub[f] - lb[f]));
  }
  nlopt_opt opt = nlopt_create(NLOPT_LN_BOBYQA, n);
  nlopt_set_lower_bounds(opt, lb.data());
  nlopt_set_upper_bounds(opt, ub.data());
  nlopt_set_initial_step(opt, step.data());
  nlopt_set_min_objective(opt, objective, &o);
  nlopt_set_xtol_abs1(opt, 1e-7);  // ln p: a relative change of 1e-7 in each constant
  nlopt_set_maxeval(opt, 400 * static_cast<int>(n));
  double best = 0;
  const nlopt_result res = nlopt_optimize(opt, x.data(), &best);
  nlopt_destroy(opt);
  if (res < 0 && res != NLOPT_ROUNDOFF_LIMITED)
    throw Error(ExitCode::kInternal, fmt::format("fit: NLopt BOBYQA failed (nlopt_result {})", static_cast<int>(res)));
  out.evaluations += o.evaluations;
  const std::vector<double> fitted = o.full(x.data());
  const std::vector<double> rf = r(fitted);
  ++out.evaluations;
  if (sum_squares(rf) <= out.start_cost) {  // BOBYQA returns its best point; keep the start if it is no better
    out.values = fitted;
    out.residuals = rf;
    out.cost = sum_squares(rf);
  }
  return out;
}

}  // namespace mtrain::calibrate
