// Errors and exit codes: one typed exception per failure class, each with a
// distinct process exit code (documented in README.md "Exit codes").
// A message names the thing that is wrong; the hint says what to do.
#pragma once

#include <stdexcept>
#include <string>

namespace mtrain {

enum class ExitCode : int {
  kOk = 0,
  kInternal = 1,     // a bug in mtrain
  kUsage = 2,        // command line: unknown flag, bad value on the command line
  kConfig = 3,       // YAML / argument validation
  kData = 4,         // dataset, tokenizer
  kCheckpoint = 5,   // checkpoint save/load
  kOutOfMemory = 6,  // simulated NPU HBM exhausted
  kNonFinite = 7,    // NaN/Inf in loss or gradient norm
  kDistributed = 8,  // MPI, launch, rendezvous, a rank died
};

const char* exit_code_name(ExitCode code);

class Error : public std::runtime_error {
 public:
  Error(ExitCode code, std::string message, std::string hint = "")
      : std::runtime_error(std::move(message)), code_(code), hint_(std::move(hint)) {}
  ExitCode code() const { return code_; }
  const std::string& hint() const { return hint_; }

 private:
  ExitCode code_;
  std::string hint_;
};

struct UsageError : Error {
  explicit UsageError(std::string m, std::string h = "") : Error(ExitCode::kUsage, std::move(m), std::move(h)) {}
};
struct ConfigError : Error {
  explicit ConfigError(std::string m, std::string h = "") : Error(ExitCode::kConfig, std::move(m), std::move(h)) {}
};
struct DataError : Error {
  explicit DataError(std::string m, std::string h = "") : Error(ExitCode::kData, std::move(m), std::move(h)) {}
};
struct CheckpointError : Error {
  explicit CheckpointError(std::string m, std::string h = "")
      : Error(ExitCode::kCheckpoint, std::move(m), std::move(h)) {}
};
struct OutOfMemoryError : Error {
  explicit OutOfMemoryError(std::string m, std::string h = "")
      : Error(ExitCode::kOutOfMemory, std::move(m), std::move(h)) {}
};
struct NonFiniteError : Error {
  explicit NonFiniteError(std::string m, std::string h = "")
      : Error(ExitCode::kNonFinite, std::move(m), std::move(h)) {}
};
struct DistributedError : Error {
  explicit DistributedError(std::string m, std::string h = "")
      : Error(ExitCode::kDistributed, std::move(m), std::move(h)) {}
};

// "error: <message>\n  hint: <hint>" as printed by main().
std::string format_error(const Error& e);

}  // namespace mtrain
