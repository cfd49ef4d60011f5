// CPU_AFFINITY_CONF applied to this rank's threads (the plan comes from
// device/cpu_affinity.h). Every thread the process has is bound, whenever it
// was created (MPI's progress threads, the OpenMP pool that also runs
// OpenBLAS); threads started later inherit the main thread's binding.
//   mode 1: every thread on all cores of the plan
//   mode 2: the main thread on the plan's first core, OpenMP (and so
//           OpenBLAS) thread t on core t mod K of the plan's K cores, every
//           other thread on the cores no compute thread holds (all K if none
//           is left)
#pragma once

#include <string>

#include "config/args.h"
#include "device/cpu_affinity.h"

namespace mtrain::train {

// Binds as above for `threads` OpenMP threads; returns the log line. Throws
// Error when the kernel refuses a binding.
std::string bind_rank_threads(int mode, const device::AffinityPlan& plan, int threads);

// Threads for OpenBLAS and mtrain's kernels: --num_threads, else
// OMP_NUM_THREADS / OPENBLAS_NUM_THREADS, else the rank's CPU_AFFINITY_CONF
// cores (`affinity_cores` > 0), else cores / ranks on this node.
int configure_threads(const config::Args& args, int local_ranks, int affinity_cores = 0);

}  // namespace mtrain::train
