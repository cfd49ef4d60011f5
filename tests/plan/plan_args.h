// Shared by the mtrain plan tests: a job's words parsed as `mtrain <command>`
// would parse them for a world of `world` ranks (validated).
#pragma once

#include <string>
#include <vector>

#include "config/cli.h"

namespace mtrain::plan {

inline config::Args parse_words(std::vector<std::string> words, int world, const char* command = "pt") {
  words.insert(words.begin(), {"mtrain", command});
  std::vector<const char*> argv;
  for (const std::string& w : words) argv.push_back(w.c_str());
  config::ParseOptions o;
  o.world_size = world;
  return config::parse_command_line(static_cast<int>(argv.size()), argv.data(), o).args;
}

}  // namespace mtrain::plan
