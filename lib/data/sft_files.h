// The files behind one --dataset entry, read into conversations. An entry is
// a file or a folder (its .jsonl/.json/.csv files, not recursive, in name
// order). File formats, by extension:
//   .jsonl  one record per line; origin "file:line"
//   .json   one JSON list of records; origin "file[i]" (0-based)
//   .csv    a header row naming the columns, one record per row (every cell a
//           string, empty cells ""); origin "file:line" of the row's end
// Each record's sample format (alpaca / messages / sharegpt) is detected per
// record by parse_sft_record. A malformed record (invalid JSON, a missing
// field, an unknown format, a CSV row with the wrong number of cells) throws
// DataError "origin: what is wrong", unless strict is off: then it is skipped
// and counted, and more than max_malformed skipped records in total throw.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/chat_template.h"

namespace mtrain::data {

struct SftReadOptions {
  bool strict = true;           // swift --strict; false: skip malformed records
  int64_t max_malformed = 100;  // with strict off: the most records skipped over all files
};

struct SftRecords {
  std::vector<Conversation> conversations;
  int64_t num_malformed = 0;    // records skipped (strict off), over every read_sft_records call
  std::string first_malformed;  // the first skipped record's error message
};

// The data files of `path` (itself when it is a file). Throws DataError for a
// missing path and for a folder without data files.
std::vector<std::string> dataset_files(const std::string& path);

// Appends the records of `path` (file or folder) to `out`. Throws DataError
// naming the path for an unreadable file, an unknown extension and a file
// without records.
void read_sft_records(const std::string& path, const SftReadOptions& options, SftRecords& out);

// The records of several `path[#N]` specs (data/dataset_sample.h),
// concatenated in order; spec i samples with stream first_stream + i of
// `seed`. Malformed-record counts accumulate in `stats` (its conversations
// are left alone).
std::vector<Conversation> read_sft_datasets(const std::vector<std::string>& specs, const SftReadOptions& options,
                                            uint64_t seed, uint64_t first_stream, SftRecords& stats);

}  // namespace mtrain::data
