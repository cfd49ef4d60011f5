// Line-by-line JSONL reading with error messages that point at `file:line`.
#pragma once

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "common/errors.h"

namespace mtrain::data {

// Calls fn(record, origin) for each non-blank line, origin = "path:line".
// Throws DataError for an unreadable file ("cannot open dataset file ...")
// and for malformed JSON ("path:line:col: invalid JSON: ..."). Returns the
// number of records.
// With on_malformed set, an invalid line is passed to it (and skipped)
// instead of thrown.
int64_t read_jsonl(const std::string& path,
                   const std::function<void(const nlohmann::json& record, const std::string& origin)>& fn,
                   const std::function<void(const DataError& error)>& on_malformed = nullptr);

// Throws DataError("cannot open dataset file '<path>': <reason>") with a hint.
[[noreturn]] void throw_unreadable_dataset(const std::string& path);
// Opens a dataset file for reading (binary); a missing, unreadable or
// directory path throws as throw_unreadable_dataset does.
std::ifstream open_dataset_file(const std::string& path);

}  // namespace mtrain::data
