// dump.json of the precision dumper (docs/PRECISION.md): one rank's records of
// one iteration, written by precision_dump.cc and read by precision_compare.cc.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "observe/precision_dump.h"

namespace mtrain::observe {

inline constexpr const char* kDumpFormat = "mtrain-precision-dump";
inline constexpr int kDumpVersion = 1;

struct DumpFile {
  int64_t iteration = 0;
  DumpRankInfo info;
  std::string level;
  std::map<std::string, std::vector<std::string>> fused_ops;  // fusion flag -> ops it fused
  std::vector<DumpRecord> records;
  std::optional<NonFiniteFinding> first_nonfinite;
};

nlohmann::json dump_file_to_json(const DumpFile& f);
// Throws DataError naming `path` when `j` is not a dump of this format.
DumpFile dump_file_from_json(const nlohmann::json& j, const std::string& path);

}  // namespace mtrain::observe
