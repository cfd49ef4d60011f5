#include "data/jsonl.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/errors.h"

namespace mtrain::data {
namespace {

// nlohmann says "[json.exception.parse_error.101] parse error at line 1, column 7: <reason>";
// keep only <reason>, since line and column are reported relative to the file.
std::string parse_error_reason(const std::string& what) {
  const size_t column = what.find("column ");
  const size_t colon = column == std::string::npos ? std::string::npos : what.find(": ", column);
  return colon == std::string::npos ? what : what.substr(colon + 2);
}

}  // namespace

void throw_unreadable_dataset(const std::string& path) {
  const std::string reason = std::strerror(errno);
  std::error_code ec;
  const auto cwd = std::filesystem::current_path(ec).string();
  throw DataError("cannot open dataset file '" + path + "': " + reason,
                  "check the --dataset path (relative paths are resolved from " + cwd + ")");
}

std::ifstream open_dataset_file(const std::string& path) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in || std::filesystem::is_directory(path)) {
    if (errno == 0) errno = std::filesystem::is_directory(path) ? EISDIR : ENOENT;
    throw_unreadable_dataset(path);
  }
  return in;
}

int64_t read_jsonl(const std::string& path,
                   const std::function<void(const nlohmann::json& record, const std::string& origin)>& fn,
                   const std::function<void(const DataError& error)>& on_malformed) {
  std::ifstream in = open_dataset_file(path);
  std::string line;
  int64_t line_number = 0, records = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string origin = path + ":" + std::to_string(line_number);
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      DataError error(origin + ":" + std::to_string(e.byte) + ": invalid JSON: " + parse_error_reason(e.what()),
                      "each line of a .jsonl file must be one complete JSON object");
      if (!on_malformed) throw error;
      on_malformed(error);
      continue;
    }
    ++records;
    fn(record, origin);
  }
  return records;
}

}  // namespace mtrain::data
