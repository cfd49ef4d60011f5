#include "train/fault_injection.h"

#include <fmt/format.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <thread>

#include "common/errors.h"

namespace mtrain::train {

namespace {

// A whole number: digits (a leading - for negatives), nothing else.
template <class Int>
bool parse_int(std::string_view s, Int* out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

std::optional<InjectedFault> parse_injected_fault(const char* fault_rank, const char* fault) {
  if (!fault || !*fault) return std::nullopt;
  InjectedFault f;
  f.spec = fault;
  const std::string_view spec = f.spec;
  const size_t at = spec.find('@');
  const std::string_view kind = spec.substr(0, at);
  const bool numbered = at != std::string_view::npos && parse_int(spec.substr(at + 1), &f.iteration);
  if ((kind != "hang" && kind != "exit") || !numbered || f.iteration < 1) {
    throw UsageError(fmt::format("MTRAIN_FAULT={}: expected hang@<iteration> or exit@<iteration>", spec),
                     "MTRAIN_FAULT is a test seam (docs/LAUNCH.md); unset it for real runs");
  }
  f.kind = kind == "hang" ? InjectedFault::Kind::kHang : InjectedFault::Kind::kExit;
  if (fault_rank && *fault_rank) {
    if (!parse_int(fault_rank, &f.rank) || f.rank < 0) {
      throw UsageError(fmt::format("MTRAIN_FAULT_RANK={}: expected a rank number >= 0", fault_rank),
                       "MTRAIN_FAULT_RANK is a test seam (docs/LAUNCH.md); unset it for real runs");
    }
  }
  return f;
}

void FaultInjectionHook::on_step_begin(int64_t iteration) {
  if (rank_ != fault_.rank || iteration != fault_.iteration) return;
  const bool hang = fault_.kind == InjectedFault::Kind::kHang;
  std::fflush(stdout);
  std::fprintf(stderr, "mtrain: injected fault (MTRAIN_FAULT=%s): rank %d %s at the start of iteration %lld\n",
               fault_.spec.c_str(), rank_, hang ? "hangs" : "exits with code 1", static_cast<long long>(iteration));
  std::fflush(stderr);
  if (!hang) std::_Exit(1);  // like a crash: no unwinding, no MPI_Finalize
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

}  // namespace mtrain::train
