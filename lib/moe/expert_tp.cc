#include "moe/expert_tp.h"

#include <cstring>
#include <vector>

#include "profiler/kernel_region.h"

namespace mtrain::moe {

namespace {

// Visits every gathered row in grouped order: fn(rank, row in the rank's block, row in grouped).
template <class Fn>
void for_each_grouped_row(const int64_t* counts, int64_t tp, int64_t E, Fn fn) {
  std::vector<int64_t> rank_off(tp * E, 0);  // start of expert e in rank r's block
  for (int64_t r = 0; r < tp; ++r)
    for (int64_t e = 1; e < E; ++e) rank_off[r * E + e] = rank_off[r * E + e - 1] + counts[r * E + e - 1];
  int64_t g = 0;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r = 0; r < tp; ++r)
      for (int64_t i = 0; i < counts[r * E + e]; ++i) fn(r, rank_off[r * E + e] + i, g++);
}

}  // namespace

void etp_dispatch(parallel::Comm& tp, int64_t* counts, int64_t* rows_grp, float* grouped, float* gathered,
                  const float* local, const int64_t* local_rows, bool gather_counts, int64_t Mmax, int64_t E, int64_t C,
                  parallel::Wire wire) {
  const int64_t n = tp.size();
  if (gather_counts) tp.all_gather(local_rows, counts, E);
  tp.all_gather(local, gathered, Mmax * C, wire);
  for (int64_t e = 0; e < E; ++e) {
    rows_grp[e] = 0;
    for (int64_t r = 0; r < n; ++r) rows_grp[e] += counts[r * E + e];
  }
  profiler::Scope prof(profiler::elementwise_kernel("moe_sort_chunks_by_expert", 2.0 * n * Mmax * C, 0));
  if (profiler::shape_only()) return;
  for_each_grouped_row(counts, n, E, [&](int64_t r, int64_t i, int64_t g) {
    std::memcpy(grouped + g * C, gathered + (r * Mmax + i) * C, sizeof(float) * C);
  });
}

void etp_combine(parallel::Comm& tp, float* local, float* gathered, const float* grouped, const int64_t* counts,
                 int64_t Mmax, int64_t E, int64_t C, parallel::Wire wire) {
  const int64_t n = tp.size();
  {
    profiler::Scope prof(profiler::elementwise_kernel("moe_sort_chunks_by_rank", 2.0 * n * Mmax * C, 0));
    if (!profiler::shape_only()) {
      std::memset(gathered, 0, sizeof(float) * n * Mmax * C);
      for_each_grouped_row(counts, n, E, [&](int64_t r, int64_t i, int64_t g) {
        std::memcpy(gathered + (r * Mmax + i) * C, grouped + g * C, sizeof(float) * C);
      });
    }
  }
  tp.reduce_scatter(gathered, local, Mmax * C, parallel::ReduceOp::kSum, wire);
}

}  // namespace mtrain::moe
