// `mtrain preprocess_data`: JSONL -> Megatron indexed dataset, like
// Megatron-LM's tools/preprocess_data.py without sentence splitting: for
// each --json_keys key, the string field of every line is tokenized into one
// sequence = one document (plus the end-of-document token with
// --append_eod) and written to <output_prefix>_<key>_document.bin/.idx in
// the narrowest dtype of the vocabulary (uint16 below 65500, else int32).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace mtrain::data {

struct PreprocessOptions {
  std::string input;
  std::string output_prefix;
  std::vector<std::string> json_keys{"text"};
  bool append_eod = false;
  int64_t log_interval = 1000;  // documents between progress lines
};

struct PreprocessResult {
  int64_t documents = 0;
  int64_t tokens = 0;                 // over all keys
  std::vector<std::string> prefixes;  // one per key, "<output_prefix>_<key>_document"
};

// `progress` receives "Processed N documents (D docs/s, M MB/s)." every
// log_interval documents. Throws DataError "file:line: reason" for a
// malformed line or a missing / non-string key.
// `documents_done` (optional) receives the count after every document (for a progress line).
PreprocessResult preprocess_data(const PreprocessOptions& options, const Tokenizer& tokenizer,
                                 const std::function<void(const std::string&)>& progress = nullptr,
                                 const std::function<void(int64_t)>& documents_done = nullptr);

// Lines holding more than whitespace in `path` (the documents a JSONL file
// will give; 0 when it cannot be read: the reader reports that).
int64_t count_nonblank_lines(const std::string& path);

}  // namespace mtrain::data
