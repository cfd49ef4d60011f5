#include "moe/expert_tp.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/errors.h"
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

// Rows per rank in the gather: the most any rank holds (every rank knows the
// gathered counts, so all agree), not the worst case Mmax: Megatron's
// all-gather-v moves what the ranks hold.
int64_t gather_rows(const int64_t* counts, int64_t tp, int64_t E) {
  int64_t most = 0;
  for (int64_t r = 0; r < tp; ++r) {
    int64_t rows = 0;
    for (int64_t e = 0; e < E; ++e) rows += counts[r * E + e];
    most = std::max(most, rows);
  }
  return most;
}

}  // namespace

void etp_dispatch(parallel::Comm& tp, int64_t* counts, int64_t* rows_grp, float* grouped, float* gathered,
                  const float* local, const int64_t* local_rows, bool gather_counts, int64_t Mmax, int64_t E, int64_t C,
                  parallel::Wire wire) {
  const int64_t n = tp.size();
  if (gather_counts) tp.all_gather(local_rows, counts, E);
  // Shape only (MetaComm moves nothing): every rank is taken to hold what this rank holds.
  if (gather_counts && !tp.moves_data())
    for (int64_t r = 0; r < n; ++r) std::copy(local_rows, local_rows + E, counts + r * E);
  const int64_t rows = gather_rows(counts, n, E);
  if (rows > Mmax) throw Error(ExitCode::kInternal, "moe expert TP: a rank holds more rows than its buffer");
  tp.all_gather(local, gathered, rows * C, wire);
  for (int64_t e = 0; e < E; ++e) {
    rows_grp[e] = 0;
    for (int64_t r = 0; r < n; ++r) rows_grp[e] += counts[r * E + e];
  }
  profiler::Scope prof(profiler::elementwise_kernel("moe_sort_chunks_by_expert", 2.0 * n * rows * C, 0));
  if (profiler::shape_only()) return;
  for_each_grouped_row(counts, n, E, [&](int64_t r, int64_t i, int64_t g) {
    std::memcpy(grouped + g * C, gathered + (r * rows + i) * C, sizeof(float) * C);
  });
}

void etp_combine(parallel::Comm& tp, float* local, float* gathered, const float* grouped, const int64_t* counts,
                 int64_t Mmax, int64_t E, int64_t C, parallel::Wire wire) {
  const int64_t n = tp.size(), rows = gather_rows(counts, n, E);
  {
    profiler::Scope prof(profiler::elementwise_kernel("moe_sort_chunks_by_rank", 2.0 * n * rows * C, 0));
    if (!profiler::shape_only()) {
      std::memset(gathered, 0, sizeof(float) * n * rows * C);
      for_each_grouped_row(counts, n, E, [&](int64_t r, int64_t i, int64_t g) {
        std::memcpy(gathered + (r * rows + i) * C, grouped + g * C, sizeof(float) * C);
      });
    }
  }
  tp.reduce_scatter(gathered, local, rows * C, parallel::ReduceOp::kSum, wire);
  // Rows past the gathered ones were not sent: 0.
  if (!profiler::shape_only()) std::memset(local + rows * C, 0, sizeof(float) * (Mmax - rows) * C);
}

}  // namespace mtrain::moe
