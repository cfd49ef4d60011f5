// FAULT INJECTION -- a test seam, not a feature (like leveldb's
// fault_injection_test Env). Two environment variables, read once by
// run_training and by nothing else, make one rank misbehave at the start of
// an iteration so the tests can prove that a stuck or crashed rank ends the
// whole job (docs/LAUNCH.md "Fault injection"):
//   MTRAIN_FAULT=hang@<iteration>  the rank sleeps forever (the watchdog must end it)
//   MTRAIN_FAULT=exit@<iteration>  the rank ends at once with exit code 1, like a crash
//   MTRAIN_FAULT_RANK=<r>          the rank that does it (default 0)
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "train/hooks.h"

namespace mtrain::train {

struct InjectedFault {
  enum class Kind { kHang, kExit };
  Kind kind = Kind::kHang;
  int rank = 0;
  int64_t iteration = 1;
  std::string spec;  // the MTRAIN_FAULT value, for the message
};

// Parses the two variables' values (null = unset). No fault when `fault` is
// null or empty; a malformed value is a UsageError naming the variable.
std::optional<InjectedFault> parse_injected_fault(const char* fault_rank, const char* fault);

// Carries out `fault` in on_step_begin of its iteration on its rank.
class FaultInjectionHook : public TrainHook {
 public:
  FaultInjectionHook(InjectedFault fault, int rank) : fault_(std::move(fault)), rank_(rank) {}
  void on_step_begin(int64_t iteration) override;

 private:
  InjectedFault fault_;
  int rank_;
};

}  // namespace mtrain::train
