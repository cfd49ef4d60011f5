// Helper of the lib/plan tests: a command line written as one string.
#pragma once

#include <string>
#include <vector>

#include "config/cli.h"

namespace mtrain::plan::testing {

// Parses `flags` (words separated by single spaces) like the command line of
// `mtrain` for a world of `world` ranks.
inline config::Args parse(const std::string& flags, int world) {
  std::vector<std::string> words{"mtrain"};
  std::string w;
  for (char c : flags + " ") {
    if (c != ' ') {
      w += c;
    } else if (!w.empty()) {
      words.push_back(w);
      w.clear();
    }
  }
  std::vector<const char*> argv;
  for (const auto& s : words) argv.push_back(s.c_str());
  config::ParseOptions o;
  o.world_size = world;
  return config::parse_command_line(static_cast<int>(argv.size()), argv.data(), o).args;
}

}  // namespace mtrain::plan::testing
