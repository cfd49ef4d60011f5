#include "train/cpu_binding.h"

#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <vector>

namespace mtrain::train {

using device::bind_thread;
using device::format_core_list;

std::string bind_rank_threads(int mode, const device::AffinityPlan& plan, int threads) {
  const std::vector<int>& cores = plan.cores;
  if (mode == 0 || cores.empty()) return "";
  if (mode == 1) {
    for (int tid : device::process_threads()) bind_thread(tid, cores);
    return fmt::format("CPU_AFFINITY_CONF mode 1: every thread on cores {} ({})", format_core_list(cores), plan.note);
  }
  // The OpenMP pool keeps its threads between parallel regions (libgomp), so
  // the thread that is number t here is number t in OpenBLAS's regions too.
  std::vector<int> team(static_cast<size_t>(threads), 0);
#pragma omp parallel num_threads(threads)
  team[static_cast<size_t>(omp_get_thread_num())] = static_cast<int>(gettid());
  const size_t k = cores.size();
  std::vector<int> compute;  // core of OpenMP thread t
  for (size_t t = 0; t < team.size(); ++t) compute.push_back(cores[t % k]);
  std::vector<int> rest(cores.begin() + static_cast<std::ptrdiff_t>(std::min(team.size(), k)), cores.end());
  if (rest.empty()) rest = cores;
  for (int tid : device::process_threads()) {
    const auto it = std::find(team.begin(), team.end(), tid);
    if (it == team.end()) bind_thread(tid, rest);
  }
  for (size_t t = 0; t < team.size(); ++t) bind_thread(team[t], {compute[t]});  // team[0] is this (main) thread
  return fmt::format(
      "CPU_AFFINITY_CONF mode 2: main thread on core {}, compute threads on {}, other threads on {} ({})", cores[0],
      fmt::join(compute, ","), format_core_list(rest), plan.note);
}

int configure_threads(const config::Args& args, int local_ranks, int affinity_cores) {
  int n = 0;
  if (args.num_threads) {
    n = *args.num_threads;
  } else if (const char* e = std::getenv("OMP_NUM_THREADS")) {
    n = std::atoi(e);
  } else if (const char* e2 = std::getenv("OPENBLAS_NUM_THREADS")) {
    n = std::atoi(e2);
  }
  if (n <= 0 && affinity_cores > 0) n = affinity_cores;
  if (n <= 0) n = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, local_ranks));
  // The OpenMP OpenBLAS build runs its GEMMs on this OpenMP pool, but (Debian's
  // 0.3.21 at least) sizes them from its own count, fixed at load time from
  // OPENBLAS_NUM_THREADS / OMP_NUM_THREADS / the core count and not from
  // omp_set_num_threads. Set both, or --num_threads 1 (or one rank per core
  // under mpirun) would still run 2-thread GEMMs and oversubscribe the cores.
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
  return n;
}

}  // namespace mtrain::train
