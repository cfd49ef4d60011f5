// CSV files as records (libcsv, RFC 4180 quoting): the first row names the
// columns, each later row becomes a JSON object {column: cell} of strings,
// so CSV datasets go through the same record parsers as JSONL. Blank lines
// are ignored; a UTF-8 byte-order mark before the header is dropped.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "common/errors.h"

namespace mtrain::data {

// Calls fn(record, origin) per data row, origin = "path:line" (the line the
// row ends on). A row whose cell count differs from the header's is passed
// to on_malformed (skipped) if set, else thrown as DataError; broken quoting
// always throws. Returns the number of data rows read.
int64_t read_csv_records(const std::string& path,
                         const std::function<void(const nlohmann::json& record, const std::string& origin)>& fn,
                         const std::function<void(const DataError& error)>& on_malformed = nullptr);

}  // namespace mtrain::data
