#include "mtrain/launch/launch_rank.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <thread>

#include "common/errors.h"

namespace mtrain::launch {

int exit_code_of(const std::exception_ptr& error) {
  if (!error) return 0;
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return static_cast<int>(e.code());
  } catch (...) {
    return static_cast<int>(ExitCode::kInternal);
  }
}

void print_error(const std::exception_ptr& error, const WorldInfo& world, bool with_rank) {
  if (!error) return;
  std::fflush(stdout);
  const std::string where = with_rank ? fmt::format("(rank {}, node {}) ", world.rank, world.node) : "";
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    std::string text = format_error(e);  // "mtrain: error: <message>\n  hint: ..."
    const std::string head = "mtrain: error: ";
    if (!where.empty() && text.rfind(head, 0) == 0) text.insert(head.size(), where);
    fmt::print(stderr, "{}\n", text);
  } catch (const std::exception& e) {
    fmt::print(stderr,
               "mtrain: internal error: {}{}\n  hint: this is a bug in mtrain; please report it with the "
               "command line\n",
               where, e.what());
  } catch (...) {
    fmt::print(stderr, "mtrain: internal error: {}unknown exception\n", where);
  }
  std::fflush(stderr);
}

int agree_on_failure(MpiWorld* mpi, const WorldInfo& world, const std::exception_ptr& error) {
  if (mpi == nullptr || world.size == 1) {
    print_error(error, world, false);
    return exit_code_of(error);
  }
  const int mine = error ? world.rank : world.size;
  const int ok = error ? 0 : 1;
  int first = world.size, any_ok = 0;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, mpi->comm());
  if (first == world.size) return 0;
  MPI_Allreduce(&ok, &any_ok, 1, MPI_INT, MPI_MAX, mpi->comm());
  // When every rank failed (the usual case: the checks are deterministic) the message needs no rank.
  if (world.rank == first) print_error(error, world, any_ok != 0);
  int code = exit_code_of(error);
  MPI_Bcast(&code, 1, MPI_INT, first, mpi->comm());
  return code;
}

FailureChannel::FailureChannel(MPI_Comm world) { MPI_Comm_dup(world, &comm_); }

FailureChannel::~FailureChannel() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

namespace {

// FNV-1a over the error's class, message and hint: equal on ranks that failed alike.
uint64_t fingerprint(const std::exception_ptr& error) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](std::string_view s) {
    for (const unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;  // separator: ("ab","c") != ("a","bc")
  };
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    mix(std::to_string(static_cast<int>(e.code())));
    mix(e.what());
    mix(e.hint());
  } catch (const std::exception& e) {
    mix("std::exception");
    mix(e.what());
  } catch (...) {
    mix("unknown");
  }
  return h;
}

}  // namespace

bool report_command_failure(const FailureChannel& channel, const WorldInfo& world, const std::exception_ptr& error,
                            double grace_seconds) {
  // MIN over {h, ~h} gives the smallest and (inverted) the largest fingerprint.
  const uint64_t h = fingerprint(error);
  uint64_t mine[2] = {h, ~h}, all[2] = {0, 0};
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Iallreduce(mine, all, 2, MPI_UINT64_T, MPI_MIN, channel.comm(), &request);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_seconds);
  int done = 0;
  for (;;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!done) {  // some rank is still at work (maybe waiting for this one): report alone, the caller aborts
    print_error(error, world, true);
    return false;
  }
  const bool alike = all[0] == h && ~all[1] == h;
  if (!alike) {
    print_error(error, world, true);
  } else if (world.rank == 0) {
    print_error(error, world, false);
  }
  return true;
}

}  // namespace mtrain::launch
