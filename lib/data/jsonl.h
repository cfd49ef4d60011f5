// Line-by-line JSONL reading with error messages that point at `file:line`.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace mtrain::data {

// Calls fn(record, origin) for each non-blank line, origin = "path:line".
// Throws DataError for an unreadable file ("cannot open dataset file ...")
// and for malformed JSON ("path:line:col: invalid JSON: ..."). Returns the
// number of records.
int64_t read_jsonl(const std::string& path,
                   const std::function<void(const nlohmann::json& record, const std::string& origin)>& fn);

// Throws DataError("cannot open dataset file '<path>': <reason>") with a hint.
[[noreturn]] void throw_unreadable_dataset(const std::string& path);

}  // namespace mtrain::data
