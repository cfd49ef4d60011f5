#include "mtrain/launch/launch_rank.h"

#include <fmt/format.h>

#include <cstdio>

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

}  // namespace mtrain::launch
