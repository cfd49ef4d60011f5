// The calibrated device profile: the base profile's YAML file as it is (its
// keys, values and source comments), with `name:` renamed, the `cost:`
// constants given replaced (each line's source comment kept behind a note of
// the profile's value) or added, and a header of comment lines on top. The
// result reads back with config::load_device_profile (same schema); edited
// line by line because yaml-cpp (lib/config only) would drop the comments.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mtrain::calibrate {

struct CostValue {
  std::string key;  // a `cost:` key: compute_efficiency, ...
  double value = 0;
  std::string note;  // put before the line's own comment, e.g. "calibrated (profile: 0.869)"
};

// base_text: the base profile file's text. header: comment lines (written with "# ").
std::string calibrated_profile_yaml(const std::string& base_text, const std::string& new_name,
                                    const std::vector<CostValue>& values, const std::vector<std::string>& header);

}  // namespace mtrain::calibrate
