// Error reporting for a process that may be one of many ranks.
//
// Checks that every rank makes alike (parsing, validation, device binding)
// are "agreed": the ranks exchange whether they failed, the lowest failing
// rank prints its error once, and every rank leaves with that rank's exit code
// through a clean MPI shutdown. A failure inside a command's own work is
// printed by the rank that hit it (with its rank) and ends the job (MPI_Abort).
#pragma once

#include <exception>

#include "mtrain/launch/rendezvous.h"

namespace mtrain::launch {

// The exit code for an exception: its mtrain::Error class, else 1 (internal).
int exit_code_of(const std::exception_ptr& error);

// Prints "mtrain: error: ..." (+ hint) to stderr; `with_rank` prefixes "(rank R, node N)".
void print_error(const std::exception_ptr& error, const WorldInfo& world, bool with_rank);

// Collective when `mpi` is not null: returns 0 if no rank failed, else the exit
// code of the lowest failing rank, whose error has been printed exactly once.
int agree_on_failure(MpiWorld* mpi, const WorldInfo& world, const std::exception_ptr& error);

}  // namespace mtrain::launch
