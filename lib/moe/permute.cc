#include "moe/permute.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/errors.h"
#include "profiler/kernel_region.h"

namespace mtrain::moe {

namespace {

// The rows of token t in ascending order (k is small: insertion sort).
int token_rows(int32_t* out, const int32_t* slot_row, int64_t t, int64_t k) {
  int n = 0;
  for (int64_t j = 0; j < k; ++j) {
    const int32_t r = slot_row[t * k + j];
    if (r < 0) continue;
    int i = n++;
    while (i > 0 && out[i - 1] > r) out[i] = out[i - 1], --i;
    out[i] = r;
  }
  return n;
}

constexpr int kMaxTopk = 64;

}  // namespace

int64_t build_permutation(int32_t* row_token, int32_t* row_slot, int32_t* slot_row, int64_t* rows,
                          const int32_t* experts, const uint8_t* kept, int64_t N, int64_t k, int64_t E,
                          int64_t pad_to) {
  if (k > kMaxTopk) throw Error(ExitCode::kInternal, "moe permute: top-k above " + std::to_string(kMaxTopk));
  std::fill(rows, rows + E, 0);
  for (int64_t s = 0; s < N * k; ++s)
    if (!kept || kept[s]) ++rows[experts[s]];
  if (pad_to > 0) {
    for (int64_t e = 0; e < E; ++e)
      if (rows[e] > pad_to)
        throw Error(ExitCode::kInternal,
                    "moe permute: expert " + std::to_string(e) + " keeps more tokens than its capacity");
  }
  std::vector<int64_t> next(E + 1, 0);
  for (int64_t e = 0; e < E; ++e) next[e + 1] = next[e] + (pad_to > 0 ? pad_to : rows[e]);
  const int64_t M = next[E];
  std::vector<int64_t> end(next.begin() + 1, next.end());
  // Tokens ascending, so each expert's rows come out in token order (a counting sort).
  for (int64_t s = 0; s < N * k; ++s) {
    if (kept && !kept[s]) {
      slot_row[s] = -1;
      continue;
    }
    const int64_t r = next[experts[s]]++;
    row_token[r] = static_cast<int32_t>(s / k);
    row_slot[r] = static_cast<int32_t>(s);
    slot_row[s] = static_cast<int32_t>(r);
  }
  for (int64_t e = 0; e < E; ++e) {  // padding up to capacity
    for (int64_t r = next[e]; r < end[e]; ++r) row_token[r] = row_slot[r] = -1;
    if (pad_to > 0) rows[e] = pad_to;
  }
  return M;
}

void permute_forward(float* x_perm, float* probs_perm, const float* x, const float* probs, const int32_t* row_token,
                     const int32_t* row_slot, int64_t M, int64_t C, bool fused) {
  profiler::Scope prof(profiler::elementwise_kernel(fused ? "moe_permute_fused" : "moe_permute", 2.0 * M * C, 0));
  if (profiler::shape_only()) return;
  const size_t row_bytes = sizeof(float) * C;
#pragma omp parallel for schedule(static) if (M * C > 32768)
  for (int64_t r = 0; r < M; ++r) {
    if (row_token[r] < 0) {
      std::memset(x_perm + r * C, 0, row_bytes);
    } else {
      std::memcpy(x_perm + r * C, x + row_token[r] * C, row_bytes);
    }
    if (fused) probs_perm[r] = row_slot[r] < 0 ? 0.f : probs[row_slot[r]];
  }
  if (fused) return;
  for (int64_t r = 0; r < M; ++r) probs_perm[r] = row_slot[r] < 0 ? 0.f : probs[row_slot[r]];
}

void permute_backward(float* dx, const float* dx_perm, const int32_t* slot_row, int64_t N, int64_t k, int64_t C) {
  profiler::Scope prof(profiler::elementwise_kernel("moe_permute_backward", 2.0 * N * k * C, N * k * C));
  if (profiler::shape_only()) return;
#pragma omp parallel for schedule(static) if (N * C > 32768)
  for (int64_t t = 0; t < N; ++t) {
    int32_t rs[kMaxTopk];
    const int n = token_rows(rs, slot_row, t, k);
    float* d = dx + t * C;
    for (int i = 0; i < n; ++i) {
      const float* g = dx_perm + static_cast<int64_t>(rs[i]) * C;
      for (int64_t c = 0; c < C; ++c) d[c] += g[c];
    }
  }
}

void unpermute_forward(float* out, const float* y_perm, const float* probs_perm, const int32_t* slot_row, int64_t N,
                       int64_t k, int64_t M, int64_t C, bool fused, float* scratch) {
  profiler::Scope prof(
      profiler::elementwise_kernel(fused ? "moe_unpermute_fused" : "moe_unpermute", 2.0 * M * C + N * C, 2.0 * M * C));
  if (profiler::shape_only()) return;
  const float* rows = y_perm;
  if (!fused) {  // Megatron's unfused path: scale every row by its probability, then scatter-add
#pragma omp parallel for schedule(static) if (M * C > 32768)
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = 0; c < C; ++c) scratch[r * C + c] = probs_perm[r] * y_perm[r * C + c];
    rows = scratch;
  }
#pragma omp parallel for schedule(static) if (N * C > 32768)
  for (int64_t t = 0; t < N; ++t) {
    int32_t rs[kMaxTopk];
    const int n = token_rows(rs, slot_row, t, k);
    float* o = out + t * C;
    std::memset(o, 0, sizeof(float) * C);
    for (int i = 0; i < n; ++i) {
      const float* y = rows + static_cast<int64_t>(rs[i]) * C;
      const float p = fused ? probs_perm[rs[i]] : 1.f;
      if (fused) {
        for (int64_t c = 0; c < C; ++c) o[c] += p * y[c];
      } else {
        for (int64_t c = 0; c < C; ++c) o[c] += y[c];
      }
    }
  }
}

void unpermute_backward(float* dy_perm, float* dprobs, const float* dout, const float* y_perm, const float* probs_perm,
                        const int32_t* row_token, const int32_t* slot_row, int64_t N, int64_t k, int64_t M, int64_t C) {
  profiler::Scope prof(profiler::elementwise_kernel("moe_unpermute_backward", 3.0 * M * C, 3.0 * M * C));
  if (profiler::shape_only()) return;
  for (int64_t s = 0; s < N * k; ++s)
    if (slot_row[s] < 0) dprobs[s] = 0.f;
#pragma omp parallel for schedule(static) if (M * C > 32768)
  for (int64_t r = 0; r < M; ++r) {
    float* dy = dy_perm + r * C;
    const int32_t t = row_token[r];
    if (t < 0) {
      std::memset(dy, 0, sizeof(float) * C);
      continue;
    }
    const float* g = dout + static_cast<int64_t>(t) * C;
    const float* y = y_perm + r * C;
    const float p = probs_perm[r];
    double dot = 0;
    for (int64_t c = 0; c < C; ++c) {
      dy[c] = p * g[c];
      dot += static_cast<double>(g[c]) * y[c];
    }
    // The row's slot: the one of token t that maps to row r.
    for (int64_t j = 0; j < k; ++j)
      if (slot_row[t * k + j] == r) dprobs[t * k + j] = static_cast<float>(dot);
  }
}

}  // namespace mtrain::moe
