#include "common/errors.h"

namespace mtrain {

const char* exit_code_name(ExitCode code) {
  switch (code) {
    case ExitCode::kOk:
      return "ok";
    case ExitCode::kInternal:
      return "internal error";
    case ExitCode::kUsage:
      return "usage error";
    case ExitCode::kConfig:
      return "configuration error";
    case ExitCode::kData:
      return "data error";
    case ExitCode::kCheckpoint:
      return "checkpoint error";
    case ExitCode::kOutOfMemory:
      return "out of device memory";
    case ExitCode::kNonFinite:
      return "non-finite loss or gradient";
    case ExitCode::kDistributed:
      return "distributed failure";
  }
  return "unknown";
}

std::string format_error(const Error& e) {
  std::string s = "mtrain: error: ";
  s += e.what();
  if (!e.hint().empty()) {
    s += "\n  hint: ";
    s += e.hint();
  }
  return s;
}

}  // namespace mtrain
