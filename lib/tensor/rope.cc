#include "tensor/rope.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "profiler/kernel_region.h"

namespace mtrain::kernels {
namespace {

constexpr int64_t kParallelMin = 16384;

// inv_freq (D/2) in double; every angle is pos * inv_freq[i] in double, and
// cos/sin are rounded to float once, identically in both paths.
std::vector<double> inverse_frequencies(int64_t D, float base) {
  std::vector<double> inv(D / 2);
  for (int64_t i = 0; i < D / 2; ++i)
    inv[i] = std::pow(static_cast<double>(base), -2.0 * static_cast<double>(i) / static_cast<double>(D));
  return inv;
}

// Rows of cos | sin (2 * half floats each) per distinct position when the
// positions span at most B*T values (the usual case: every sequence of the
// batch repeats 0..T-1), else one row per token. Either way every value is
// float(cos/sin(pos * inv_freq[i])) computed in double, as in the unfused path;
// the table only avoids recomputing B times the same angles.
struct RopeTable {
  std::vector<float> cs;  // (rows, 2 * half)
  int32_t first = 0;      // position of row 0 (dense by position)
  bool by_position = true;
  const float* row(const int32_t* positions, int64_t bt, int64_t half) const {
    return cs.data() + (by_position ? positions[bt] - first : bt) * 2 * half;
  }
};

RopeTable rope_table(const int32_t* positions, int64_t BT, int64_t D, float base, float sign) {
  const int64_t half = D / 2;
  const std::vector<double> inv = inverse_frequencies(D, base);
  RopeTable tab;
  int32_t lo = 0, hi = -1;
  if (BT > 0) lo = hi = positions[0];
  for (int64_t bt = 1; bt < BT; ++bt) {
    lo = std::min(lo, positions[bt]);
    hi = std::max(hi, positions[bt]);
  }
  const int64_t span = static_cast<int64_t>(hi) - lo + 1;
  tab.by_position = span <= BT;
  tab.first = lo;
  const int64_t rows = tab.by_position ? span : BT;
  tab.cs.resize(static_cast<size_t>(rows * 2 * half));
#pragma omp parallel for schedule(static) if (rows * half > 1024)
  for (int64_t r = 0; r < rows; ++r) {
    const double pos = static_cast<double>(tab.by_position ? lo + r : positions[r]);
    float* cosv = tab.cs.data() + r * 2 * half;
    float* sinv = cosv + half;
    for (int64_t i = 0; i < half; ++i) {
      cosv[i] = static_cast<float>(std::cos(pos * inv[i]));
      sinv[i] = sign * static_cast<float>(std::sin(pos * inv[i]));
    }
  }
  return tab;
}

// sign = +1: forward rotation; sign = -1: its transpose (the inverse).
void rope_fused(float* x, const int32_t* positions, int64_t B, int64_t H, int64_t T, int64_t D, float base,
                float sign) {
  const int64_t half = D / 2;
  const RopeTable tab = rope_table(positions, B * T, D, base, sign);
#pragma omp parallel for schedule(static) if (B * H * T * D > kParallelMin)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t b = bt / T, t = bt % T;
    const float* __restrict cosv = tab.row(positions, bt, half);
    const float* __restrict sinv = cosv + half;
    for (int64_t h = 0; h < H; ++h) {
      float* __restrict row = x + ((b * H + h) * T + t) * D;
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = row[i], x2 = row[i + half];
        row[i] = x1 * cosv[i] + (-x2) * sinv[i];
        row[i + half] = x2 * cosv[i] + x1 * sinv[i];
      }
    }
  }
}

// Tables, rotate_half copy, then x*cos + rot*sin, as separate passes.
// scratch: cos (B, T, D) | sin (B, T, D) | rot (B, H, T, D).
void rope_unfused(float* x, const int32_t* positions, int64_t B, int64_t H, int64_t T, int64_t D, float base,
                  float sign, float* scratch) {
  const int64_t half = D / 2;
  const std::vector<double> inv = inverse_frequencies(D, base);
  float* cos_tab = scratch;
  float* sin_tab = scratch + B * T * D;
  float* rot = scratch + 2 * B * T * D;
  const int64_t n = B * H * T * D;
#pragma omp parallel for schedule(static) if (B * T * D > kParallelMin)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const double pos = static_cast<double>(positions[bt]);
    for (int64_t j = 0; j < D; ++j) {  // emb = cat(freqs, freqs)
      cos_tab[bt * D + j] = static_cast<float>(std::cos(pos * inv[j % half]));
      sin_tab[bt * D + j] = static_cast<float>(std::sin(pos * inv[j % half]));
    }
  }
  // rotate_half(x) = [-x2, x1]; its transpose (for the inverse) is [x2, -x1].
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t r = 0; r < B * H * T; ++r) {
    const float* xr = x + r * D;
    float* rr = rot + r * D;
    for (int64_t i = 0; i < half; ++i) {
      rr[i] = -sign * xr[i + half];
      rr[i + half] = sign * xr[i];
    }
  }
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t r = 0; r < B * H * T; ++r) {
    const int64_t b = r / (H * T), t = r % T;
    const float* c = cos_tab + (b * T + t) * D;
    const float* s = sin_tab + (b * T + t) * D;
    float* xr = x + r * D;
    const float* rr = rot + r * D;
    for (int64_t j = 0; j < D; ++j) xr[j] = xr[j] * c[j] + rr[j] * s[j];
  }
}

}  // namespace

void rope_forward(float* x, const int32_t* positions, int64_t B, int64_t H, int64_t T, int64_t D, float base,
                  bool fused, float* scratch) {
  profiler::Scope prof(profiler::elementwise_kernel("rope_forward", 2.0 * B * H * T * D, 3.0 * B * H * T * D));
  if (profiler::shape_only()) return;
  if (fused)
    rope_fused(x, positions, B, H, T, D, base, 1.0f);
  else
    rope_unfused(x, positions, B, H, T, D, base, 1.0f, scratch);
}

void rope_backward(float* dx, const int32_t* positions, int64_t B, int64_t H, int64_t T, int64_t D, float base,
                   bool fused, float* scratch) {
  profiler::Scope prof(profiler::elementwise_kernel("rope_backward", 2.0 * B * H * T * D, 3.0 * B * H * T * D));
  if (profiler::shape_only()) return;
  if (fused)
    rope_fused(dx, positions, B, H, T, D, base, -1.0f);
  else
    rope_unfused(dx, positions, B, H, T, D, base, -1.0f, scratch);
}

int64_t rope_scratch_floats(int64_t B, int64_t H, int64_t T, int64_t D) { return 2 * B * T * D + B * H * T * D; }

}  // namespace mtrain::kernels
