#include "calibrate/calibrate_command.h"

#include <fmt/format.h>

#include <charconv>
#include <fstream>
#include <iostream>
#include <sstream>

#include "calibrate/calibration.h"
#include "calibrate/profile_writer.h"
#include "common/atomic_file.h"
#include "common/errors.h"
#include "config/profiles.h"

namespace mtrain::calibrate {

namespace {

constexpr const char* kUsage = "`mtrain calibrate --help` shows the flags";

int non_negative(const std::string& name, const std::string& v) {
  int n = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || p != v.data() + v.size() || n < 0)
    throw UsageError(fmt::format("{} {}: not a non-negative integer", name, v), kUsage);
  return n;
}

std::string percent(double predicted, double measured) {
  return fmt::format("{:+.1f}%", 100.0 * (predicted / measured - 1.0));
}

// The constant's fit status, and whether the fit stopped at a bound.
std::string status_text(const Calibration& c, int k) {
  std::string s = fit_status_text(c.fit.status[k]);
  const double v = constant_of(c.calibrated, k);
  if (c.fit.status[k] == FitStatus::kFitted && (v <= kConstantLower || v >= kConstantUpper))
    s += fmt::format(" (at its {} bound)", v <= kConstantLower ? "lower" : "upper");
  return s;
}

// The fit's report: the constants, then one line per run, then the means.
std::vector<std::string> report_lines(const Calibration& c, const std::string& base_file) {
  std::vector<std::string> l;
  l.push_back(
      fmt::format("Calibrated from {} ({}) on {} measured run(s): bounded least squares of log(predicted / "
                  "measured) step time (NLopt BOBYQA, each constant in [0.05, 1])",
                  c.base.name, base_file, c.runs.size()));
  l.push_back(
      fmt::format("  {:<26} {:>9} {:>11} {:>11}  {}", "constant", "profile", "calibrated", "elasticity", "status"));
  for (int k = 0; k < kConstantCount; ++k)
    l.push_back(fmt::format("  {:<26} {:>9.4f} {:>11.4f} {:>11.3f}  {}", kFittedConstants[k],
                            constant_of(c.base.cost, k), constant_of(c.calibrated, k), c.fit.elasticity[k],
                            status_text(c, k)));
  l.push_back(fmt::format("  {:<3} {:>11} {:>19} {:>19} {:>19}  {}", "run", "measured ms", "profile ms (error)",
                          "calibrated ms", "leave-one-out ms", "source: layout"));
  for (size_t i = 0; i < c.runs.size(); ++i) {
    const CalibratedRun& r = c.runs[i];
    const double m = r.run.measured_s;
    const std::string loo =
        r.loo_s > 0 ? fmt::format("{:.1f} ({})", r.loo_s * 1e3, percent(r.loo_s, m)) : std::string("-");
    l.push_back(fmt::format("  {:<3} {:>11.1f} {:>19} {:>19} {:>19}  {} ({}, median of {} lines): {}", i + 1, m * 1e3,
                            fmt::format("{:.1f} ({})", r.before_s * 1e3, percent(r.before_s, m)),
                            fmt::format("{:.1f} ({})", r.after_s * 1e3, percent(r.after_s, m)), loo, r.run.source,
                            r.run.format, r.run.used_lines, layout_summary(r.run.args)));
  }
  l.push_back(fmt::format("  mean |error|: profile {:.1f}%, calibrated (in-sample) {:.1f}%, leave-one-out {}",
                          100 * c.before_mean, 100 * c.after_mean,
                          c.runs.size() > 1 ? fmt::format("{:.1f}%", 100 * c.loo_mean) : "- (one run)"));
  return l;
}

std::string read_text(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw ConfigError(fmt::format("{}: cannot read the device profile", file));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

CalibrateOptions parse_calibrate_args(const std::vector<std::string>& args) {
  CalibrateOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i], value;
    if (a == "-h" || a == "--help") {
      o.help = true;
      continue;
    }
    if (a.rfind("--", 0) != 0) throw UsageError(fmt::format("unexpected argument '{}'", a), kUsage);
    std::replace(a.begin() + 2, a.end(), '-', '_');
    const size_t eq = a.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
    }
    const auto next = [&]() -> std::string {
      if (inline_value) return value;
      if (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0) throw UsageError(a + " needs a value", kUsage);
      return args[++i];
    };
    if (a == "--device_profile") {
      o.device_profile = next();
    } else if (a == "--output") {
      o.output = next();
    } else if (a == "--skip_iters") {
      o.skip_iters = non_negative(a, next());
    } else if (a == "--runs") {
      if (inline_value) o.runs.push_back(value);
      while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) o.runs.push_back(args[++i]);
      if (o.runs.empty()) throw UsageError("--runs needs at least one run directory or log", kUsage);
    } else {
      throw UsageError(fmt::format("unknown flag {} for mtrain calibrate", a), kUsage);
    }
  }
  if (o.help) return o;
  if (o.device_profile.empty())
    throw UsageError("mtrain calibrate needs --device_profile", "the profile to calibrate, e.g. A100-SXM-80GB");
  if (o.runs.empty()) throw UsageError("mtrain calibrate needs --runs", "measured runs: run directories or logs");
  return o;
}

std::string calibrate_help() {
  return "mtrain calibrate --device_profile NAME_OR_FILE --runs DIR_OR_LOG [DIR_OR_LOG ...]\n"
         "                 [--output calibrated.yaml] [--skip_iters 2]\n"
         "Fits the profile's efficiencies (compute, flash forward/backward, memory, intra- and inter-node link)\n"
         "to measured runs: each run's dry run, re-priced, against its measured step time (bounded least squares\n"
         "of log(predicted / measured); constants the runs are not sensitive to keep the profile's value). Writes\n"
         "a device profile to plan with (--device_profile ./calibrated.yaml) and prints the fit, each run's error\n"
         "before and after, and the leave-one-out error (each run predicted by a fit on the others).\n"
         "  --runs        mtrain run directories (args.json + logging.jsonl) or Megatron-LM stdout logs (the\n"
         "                arguments block and the 'elapsed time per iteration (ms)' lines)\n"
         "  --skip_iters  warm-up iterations left out of each run's median step time (default 2)\n"
         "  --output      the calibrated profile (default ./calibrated.yaml)\n";
}

int run_calibrate_command(const CalibrateOptions& o, std::ostream& out) {
  const std::string base_file = config::resolve_device_profile_path(o.device_profile);
  std::vector<MeasuredRun> runs;
  for (const std::string& r : o.runs) runs.push_back(read_measured_run(r, {o.skip_iters, base_file}));
  const Calibration c = calibrate(std::move(runs), [](const std::string& what) { std::cerr << what << "\n"; });
  const std::vector<std::string> lines = report_lines(c, base_file);
  std::vector<CostValue> values;
  for (int k = 0; k < kConstantCount; ++k) {
    const double base = constant_of(c.base.cost, k), now = constant_of(c.calibrated, k);
    if (c.fit.status[k] == FitStatus::kFitted)
      values.push_back({kFittedConstants[k], now, fmt::format("calibrated (profile: {})", base)});
    else if (base != now)  // a flash efficiency of 0, written as the compute efficiency it meant
      values.push_back({kFittedConstants[k], now, "the profile's 0: as compute_efficiency, held"});
  }
  std::vector<std::string> header = {"A device profile calibrated by `mtrain calibrate` (lib/calibrate): the base",
                                     "profile below with the fitted cost: constants. The fit:"};
  header.insert(header.end(), lines.begin(), lines.end());
  header.push_back("");
  const std::string yaml = calibrated_profile_yaml(read_text(base_file), c.base.name + "-calibrated", values, header);
  PosixFileSystem fs;
  write_file_atomic(fs, o.output, yaml);
  // The file must price what the fit priced.
  const device::DeviceProfile back = config::load_device_profile(o.output);
  for (int k = 0; k < kConstantCount; ++k)
    if (constant_of(back.cost, k) != constant_of(c.calibrated, k))
      throw Error(ExitCode::kInternal, fmt::format("{}: {} reads back as {}, not {}", o.output, kFittedConstants[k],
                                                   constant_of(back.cost, k), constant_of(c.calibrated, k)));
  for (const std::string& l : lines) out << l << "\n";
  out << fmt::format("Wrote {}; plan with it: mtrain plan ... --device_profile {}\n", o.output, o.output);
  return 0;
}

}  // namespace mtrain::calibrate
