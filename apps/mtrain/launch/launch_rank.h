// Error reporting for a process that may be one of many ranks.
//
// Checks that every rank makes alike (parsing, validation, device binding)
// are "agreed": the ranks exchange whether they failed, the lowest failing
// rank prints its error once, and every rank leaves with that rank's exit code
// through a clean MPI shutdown. A failure inside a command's own work is
// compared on a FailureChannel: when every rank fails alike within a short
// grace (e.g. a missing dataset file) it is printed once, with a clean MPI
// shutdown; otherwise each failing rank prints its own error with its rank,
// and if some rank did not fail the job ends (MPI_Abort): it may be waiting
// in a collective.
#pragma once

#include <mpi.h>

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

// A communicator of its own (a dup of the world) on which failed ranks compare
// their errors without meeting the command's collectives. Constructing it is
// collective; destroy it before MPI_Finalize.
class FailureChannel {
 public:
  explicit FailureChannel(MPI_Comm world);
  ~FailureChannel();
  FailureChannel(const FailureChannel&) = delete;
  FailureChannel& operator=(const FailureChannel&) = delete;
  MPI_Comm comm() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// Seconds a failed rank waits for the others to fail too before it reports alone.
inline constexpr double kFailureGraceSeconds = 2.0;

// Reports this rank's failed command (`error` set). If every rank reaches this
// within `grace_seconds`, the errors are compared: identical (message, hint
// and class) ones are printed once by rank 0 without a rank, different ones
// by each rank with its rank; returns true (every rank is here: MPI can shut
// down cleanly). Otherwise this rank prints its error with its rank and
// returns false: the caller must end the job (MPI_Abort).
bool report_command_failure(const FailureChannel& channel, const WorldInfo& world, const std::exception_ptr& error,
                            double grace_seconds = kFailureGraceSeconds);

}  // namespace mtrain::launch
