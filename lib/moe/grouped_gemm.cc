#include "moe/grouped_gemm.h"

#include <cblas.h>

#include <algorithm>
#include <vector>

#include "profiler/kernel_region.h"

namespace mtrain::moe {

namespace {

// Rows per tile of the grouped kernel: large enough for an efficient sgemm,
// small enough that a few experts still give every thread work.
constexpr int64_t kTileRows = 64;

struct Tile {
  int64_t group, begin, end;  // [begin, end) of the group's rows, or of OC for the weight gradient
};

int64_t total_rows(const int64_t* rows, int64_t groups) {
  int64_t m = 0;
  for (int64_t g = 0; g < groups; ++g) m += rows[g];
  return m;
}

// Tiles over each group's [0, extent(g)) in kTileRows steps.
template <class Extent>
std::vector<Tile> tiles(int64_t groups, Extent extent) {
  std::vector<Tile> t;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t b = 0; b < extent(g); b += kTileRows) t.push_back({g, b, std::min(extent(g), b + kTileRows)});
  return t;
}

std::vector<int64_t> row_offsets(const int64_t* rows, int64_t groups) {
  std::vector<int64_t> off(groups + 1, 0);
  for (int64_t g = 0; g < groups; ++g) off[g + 1] = off[g] + rows[g];
  return off;
}

void sgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f, a,
              static_cast<int>(std::max<int64_t>(1, lda)), b, static_cast<int>(std::max<int64_t>(1, ldb)), beta, c,
              static_cast<int>(std::max<int64_t>(1, ldc)));
}

}  // namespace

void grouped_linear_forward(float* out, const float* inp, const float* const* weights, const int64_t* rows,
                            int64_t groups, int64_t C, int64_t OC, bool grouped) {
  const int64_t M = total_rows(rows, groups);
  profiler::Scope prof(profiler::grouped_gemm_kernel(grouped ? "grouped_gemm_forward" : "expert_gemm_forward", groups,
                                                     'm', M, M, OC, C));
  if (profiler::shape_only() || M == 0 || OC == 0) return;
  const std::vector<int64_t> off = row_offsets(rows, groups);
  if (!grouped) {
    for (int64_t g = 0; g < groups; ++g)
      if (rows[g] > 0)
        sgemm(CblasNoTrans, CblasTrans, rows[g], OC, C, inp + off[g] * C, C, weights[g], C, 0.f, out + off[g] * OC, OC);
    return;
  }
  const std::vector<Tile> work = tiles(groups, [&](int64_t g) { return rows[g]; });
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < work.size(); ++i) {
    const Tile& t = work[i];
    const int64_t r0 = off[t.group] + t.begin;
    sgemm(CblasNoTrans, CblasTrans, t.end - t.begin, OC, C, inp + r0 * C, C, weights[t.group], C, 0.f, out + r0 * OC,
          OC);
  }
}

void grouped_linear_backward(float* dinp, float* const* dweights, const float* dout, const float* inp,
                             const float* const* weights, const int64_t* rows, int64_t groups, int64_t C, int64_t OC,
                             bool grouped) {
  const int64_t M = total_rows(rows, groups);
  if (M == 0) return;
  const std::vector<int64_t> off = row_offsets(rows, groups);
  const char* dname = grouped ? "grouped_gemm_backward_dinp" : "expert_gemm_backward_dinp";
  const char* wname = grouped ? "grouped_gemm_backward_dweight" : "expert_gemm_backward_dweight";
  if (dinp || profiler::shape_only()) {
    // dinp_g (M_g, C) = dout_g (M_g, OC) · W_g (OC, C)
    profiler::Scope prof(profiler::grouped_gemm_kernel(dname, groups, 'm', M, M, C, OC));
    if (!profiler::shape_only() && !grouped) {
      for (int64_t g = 0; g < groups; ++g)
        if (rows[g] > 0)
          sgemm(CblasNoTrans, CblasNoTrans, rows[g], C, OC, dout + off[g] * OC, OC, weights[g], C, 0.f,
                dinp + off[g] * C, C);
    } else if (!profiler::shape_only()) {
      const std::vector<Tile> work = tiles(groups, [&](int64_t g) { return rows[g]; });
#pragma omp parallel for schedule(dynamic)
      for (size_t i = 0; i < work.size(); ++i) {
        const Tile& t = work[i];
        const int64_t r0 = off[t.group] + t.begin;
        sgemm(CblasNoTrans, CblasNoTrans, t.end - t.begin, C, OC, dout + r0 * OC, OC, weights[t.group], C, 0.f,
              dinp + r0 * C, C);
      }
    }
  }
  // dW_g (OC, C) += dout_g (M_g, OC)^T · inp_g (M_g, C); none for frozen experts (null gradients, in a
  // dry run too: its trainable gradients are non-null tokens).
  if (std::none_of(dweights, dweights + groups, [](const float* d) { return d != nullptr; })) return;
  profiler::Scope prof(profiler::grouped_gemm_kernel(wname, groups, 'k', M, OC, C, M));
  if (profiler::shape_only()) return;
  if (!grouped) {
    for (int64_t g = 0; g < groups; ++g)
      if (rows[g] > 0 && dweights[g])
        sgemm(CblasTrans, CblasNoTrans, OC, C, rows[g], dout + off[g] * OC, OC, inp + off[g] * C, C, 1.f, dweights[g],
              C);
    return;
  }
  // Tiles over each expert's output rows: every dW element is one M_g-term sum, written by one tile.
  const std::vector<Tile> work = tiles(groups, [&](int64_t g) { return rows[g] > 0 && dweights[g] ? OC : 0; });
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < work.size(); ++i) {
    const Tile& t = work[i];
    const int64_t g = t.group;
    sgemm(CblasTrans, CblasNoTrans, t.end - t.begin, C, rows[g], dout + off[g] * OC + t.begin, OC, inp + off[g] * C, C,
          1.f, dweights[g] + t.begin * C, C);
  }
}

}  // namespace mtrain::moe
