// `mtrain calibrate --device_profile NAME_OR_FILE --runs DIR_OR_LOG... [--output FILE] [--skip_iters N]`:
// reads measured runs (measured_run.h), fits the profile's efficiencies to
// their step times (calibration.h), prints the fit's table and writes the
// calibrated profile (profile_writer.h) with the same table as comments, to
// plan with: `mtrain plan ... --device_profile ./calibrated.yaml`.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace mtrain::calibrate {

struct CalibrateOptions {
  std::string device_profile;  // required
  std::vector<std::string> runs;
  std::string output = "calibrated.yaml";
  int skip_iters = 2;
  bool help = false;
};

// Throws UsageError on a missing or malformed flag.
CalibrateOptions parse_calibrate_args(const std::vector<std::string>& args);
std::string calibrate_help();
int run_calibrate_command(const CalibrateOptions& o, std::ostream& out);

}  // namespace mtrain::calibrate
