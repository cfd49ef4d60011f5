// Shared by the mtrain plan tests: a job's words parsed as `mtrain <command>`
// would parse them for a world of `world` ranks (validated), a plan's flags
// appended to them, and the demo jobs on the tiny_test device.
#pragma once

#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "config/cli.h"

namespace mtrain::plan {

// One case of a test parameterised by layouts: its name (what gtest prints),
// the ranks it runs on and its flags.
struct LayoutCase {
  const char* name;
  int ranks;
  const char* flags;
};
inline void PrintTo(const LayoutCase& l, std::ostream* os) { *os << l.name; }

inline config::Args parse_words(std::vector<std::string> words, int world, const char* command = "pt") {
  words.insert(words.begin(), {"mtrain", command});
  std::vector<const char*> argv;
  for (const std::string& w : words) argv.push_back(w.c_str());
  config::ParseOptions o;
  o.world_size = world;
  return config::parse_command_line(static_cast<int>(argv.size()), argv.data(), o).args;
}

// `words` then the words of `flags` (e.g. a layout's printed flags).
inline std::vector<std::string> with_flags(std::vector<std::string> words, const std::string& flags) {
  std::istringstream in(flags);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// The demo decoder (4 layers, 4 heads, 2 query groups) on the 64 MiB
// tiny_test device, 4 ranks of one node.
inline std::vector<std::string> demo(const std::string& preset, int seq) {
  return {"--model_preset",
          preset,
          "--vocab_size",
          "1024",
          "--global_batch_size",
          "8",
          "--seq_length",
          std::to_string(seq),
          "--max_position_embeddings",
          std::to_string(seq),
          "--device_profile",
          "tiny_test",
          "--train_iters",
          "1"};
}

}  // namespace mtrain::plan
