// `mtrain preprocess_data`: the command-line face of preprocess.h, spelled
// like Megatron-LM's tools/preprocess_data.py (hyphens or underscores):
//
//   mtrain preprocess_data --input corpus.jsonl --output_prefix out/corpus
//       --tokenizer configs/demo/tokenizer.json --append_eod
//   -> out/corpus_text_document.bin / .idx, for `mtrain pt --data_path out/corpus_text_document`
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "data/preprocess.h"

namespace mtrain::data {

struct PreprocessCommandOptions {
  PreprocessOptions preprocess;
  std::string tokenizer;
  bool help = false;
};

// Throws UsageError (exit 2) for unknown flags, missing values or inputs.
PreprocessCommandOptions parse_preprocess_args(const std::vector<std::string>& args);
std::string preprocess_help();

// Tokenizes and writes; progress lines and a summary go to `out`. Returns 0.
int run_preprocess_command(const PreprocessCommandOptions& options, std::ostream& out);

}  // namespace mtrain::data
