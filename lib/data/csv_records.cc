#include "data/csv_records.h"

#include <csv.h>

#include <vector>

#include "data/jsonl.h"

namespace mtrain::data {
namespace {

// libcsv calls back per cell (cb1) and per row end (cb2); rows collect here.
struct CsvRows {
  std::vector<std::string> cells;                                  // the row being read
  std::vector<std::pair<std::vector<std::string>, int64_t>> rows;  // complete rows and their end line
  int64_t line = 0;
};

void on_cell(void* text, size_t size, void* data) {
  auto* rows = static_cast<CsvRows*>(data);
  rows->cells.emplace_back(text ? static_cast<const char*>(text) : "", text ? size : 0);
}

void on_row_end(int /*terminator*/, void* data) {
  auto* rows = static_cast<CsvRows*>(data);
  rows->rows.emplace_back(std::move(rows->cells), rows->line);
  rows->cells.clear();
}

}  // namespace

int64_t read_csv_records(const std::string& path,
                         const std::function<void(const nlohmann::json& record, const std::string& origin)>& fn,
                         const std::function<void(const DataError& error)>& on_malformed) {
  std::ifstream in = open_dataset_file(path);
  csv_parser parser;
  if (csv_init(&parser, CSV_STRICT | CSV_STRICT_FINI) != 0) throw DataError(path + ": cannot set up the CSV parser");
  CsvRows rows;
  std::vector<std::string> header;
  int64_t records = 0;
  // Rows are handed on as soon as their line is parsed, so memory stays one line deep.
  auto drain = [&] {
    for (auto& [cells, line] : rows.rows) {
      const std::string origin = path + ":" + std::to_string(line);
      if (header.empty()) {
        header = std::move(cells);
        if (!header.empty() && header[0].rfind("\xEF\xBB\xBF", 0) == 0) header[0].erase(0, 3);
        continue;
      }
      if (cells.size() != header.size()) {
        DataError error(origin + ": the row has " + std::to_string(cells.size()) + " cells, the header has " +
                            std::to_string(header.size()),
                        "quote cells that contain commas or line breaks with \"...\"");
        if (!on_malformed) throw error;
        on_malformed(error);
        continue;
      }
      nlohmann::json record = nlohmann::json::object();
      for (size_t i = 0; i < header.size(); ++i) record[header[i]] = std::move(cells[i]);
      ++records;
      fn(record, origin);
    }
    rows.rows.clear();
  };
  std::string line;
  try {
    while (std::getline(in, line)) {
      ++rows.line;
      line += '\n';
      if (csv_parse(&parser, line.data(), line.size(), on_cell, on_row_end, &rows) != line.size()) {
        throw DataError(path + ":" + std::to_string(rows.line) + ": malformed CSV: " + csv_strerror(csv_error(&parser)),
                        "a quote inside a quoted cell is written twice (\"\")");
      }
      drain();
    }
    if (csv_fini(&parser, on_cell, on_row_end, &rows) != 0) {
      throw DataError(path + ":" + std::to_string(rows.line) + ": malformed CSV: a quoted cell is not closed",
                      "close every \"...\" cell");
    }
    drain();
  } catch (...) {
    csv_free(&parser);
    throw;
  }
  csv_free(&parser);
  return records;
}

}  // namespace mtrain::data
