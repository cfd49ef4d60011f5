#include "data/sft_files.h"

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "data/csv_records.h"
#include "data/dataset_sample.h"
#include "data/jsonl.h"
#include "data/sft.h"

namespace mtrain::data {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using RecordFn = std::function<void(const Json& record, const std::string& origin)>;
using MalformedFn = std::function<void(const DataError& error)>;

constexpr const char* kFormatsHint =
    "a dataset file is .jsonl (one record per line), .json (a list of records) or "
    ".csv (a header row, then one record per row)";

std::string extension_of(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext;
}

bool is_data_file(const fs::path& p) {
  const std::string ext = extension_of(p.string());
  return ext == ".jsonl" || ext == ".json" || ext == ".csv";
}

// Line of byte offset `byte` (1-based) in `text`.
int64_t line_of(const std::string& text, size_t byte) {
  return 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(std::min(byte, text.size())), '\n');
}

void read_json_list(const std::string& path, const RecordFn& fn, const MalformedFn& on_malformed) {
  std::ifstream in = open_dataset_file(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) return;  // empty: reported by the caller
  Json list;
  try {
    list = Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw DataError(path + ":" + std::to_string(line_of(text, e.byte)) + ": invalid JSON: " + e.what(),
                    "a .json dataset is one JSON list of records; use .jsonl for one record per line");
  }
  if (!list.is_array()) {
    throw DataError(path + ": expected a JSON list of records, got " + std::string(list.type_name()), kFormatsHint);
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string origin = path + "[" + std::to_string(i) + "]";
    try {
      fn(list[i], origin);
    } catch (const DataError& e) {
      if (!on_malformed) throw;
      on_malformed(e);
    }
  }
}

void read_file(const std::string& path, const SftReadOptions& options, SftRecords& out) {
  const size_t before = out.conversations.size();
  const int64_t malformed_before = out.num_malformed;
  MalformedFn on_malformed;
  if (!options.strict) {
    on_malformed = [&](const DataError& e) {
      if (out.num_malformed == 0) out.first_malformed = e.what();
      if (++out.num_malformed > options.max_malformed) {
        throw DataError(std::string(e.what()) + " (malformed record " + std::to_string(out.num_malformed) +
                            ", more than --max_malformed " + std::to_string(options.max_malformed) + ")",
                        "fix the dataset or raise --max_malformed");
      }
    };
  }
  // Record-level errors (missing field, unknown format) are skippable like invalid JSON.
  const RecordFn parse = [&](const Json& record, const std::string& origin) {
    try {
      out.conversations.push_back(parse_sft_record(record, origin));
    } catch (const DataError& e) {
      if (!on_malformed) throw;
      on_malformed(e);
    }
  };
  const std::string ext = extension_of(path);
  if (ext == ".jsonl") {
    read_jsonl(path, parse, on_malformed);
  } else if (ext == ".json") {
    read_json_list(path, parse, on_malformed);
  } else if (ext == ".csv") {
    read_csv_records(path, parse, on_malformed);
  } else {
    throw DataError(path + ": unknown dataset format '" + ext + "'", kFormatsHint);
  }
  if (out.conversations.size() == before) {
    const int64_t skipped = out.num_malformed - malformed_before;
    throw DataError(path + ": the dataset has no samples (" +
                        (skipped ? std::to_string(skipped) + " malformed records skipped" : "the file is empty") + ")",
                    kFormatsHint);
  }
}

}  // namespace

std::vector<std::string> dataset_files(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    if (!fs::exists(path, ec)) {
      errno = ENOENT;
      throw_unreadable_dataset(path);
    }
    return {path};
  }
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && !name.starts_with(".") && is_data_file(entry.path())) {
      files.push_back(entry.path().string());
    }
  }
  if (ec) {
    errno = ec.value();
    throw_unreadable_dataset(path);
  }
  if (files.empty()) {
    throw DataError(path + ": the folder has no dataset files (.jsonl, .json or .csv)", kFormatsHint);
  }
  std::sort(files.begin(), files.end());
  return files;
}

void read_sft_records(const std::string& path, const SftReadOptions& options, SftRecords& out) {
  for (const std::string& file : dataset_files(path)) read_file(file, options, out);
}

std::vector<Conversation> read_sft_datasets(const std::vector<std::string>& specs, const SftReadOptions& options,
                                            uint64_t seed, uint64_t first_stream, SftRecords& stats) {
  std::vector<Conversation> all;
  for (size_t i = 0; i < specs.size(); ++i) {
    const DatasetSpec spec = parse_dataset_spec(specs[i]);
    SftRecords records;
    records.num_malformed = stats.num_malformed;  // the cap counts over every dataset
    records.first_malformed = stats.first_malformed;
    read_sft_records(spec.path, options, records);
    stats.num_malformed = records.num_malformed;
    stats.first_malformed = records.first_malformed;
    if (!spec.num_samples) {
      std::move(records.conversations.begin(), records.conversations.end(), std::back_inserter(all));
      continue;
    }
    const auto size = static_cast<int64_t>(records.conversations.size());
    for (int64_t index : sample_dataset_indices(size, *spec.num_samples, seed, first_stream + i))
      all.push_back(records.conversations[static_cast<size_t>(index)]);
  }
  return all;
}

}  // namespace mtrain::data
