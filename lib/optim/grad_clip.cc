#include "optim/grad_clip.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "common/errors.h"
#include "profiler/kernel_region.h"

namespace mtrain::optim {

namespace {

// The reduction order depends only on n: kBlocks contiguous blocks, each summed
// with kLanes independent accumulators (vectorisable without reassociation),
// partials added in block order. float*float is exact in double, so FMA
// contraction cannot change the result either.
constexpr int64_t kBlocks = 64;
constexpr int kLanes = 8;
// Blocks a thread sums in lockstep. One block alone is bound by the latency
// of its double adds (one dependency chain per lane), far below the memory
// bandwidth; kGroup blocks give the core kGroup independent chains. Each
// block still visits its elements in its own lane order: same bits.
constexpr int64_t kGroup = 4;
static_assert(kBlocks % kGroup == 0);

// acc (kLanes) += squares of x (n), element j into lane (lane + j) % kLanes:
// block_sum_squares' lane pattern for a piece that starts mid-block.
void accumulate_lanes(double* acc, const float* x, int64_t n, int lane) {
  int64_t i = 0;
  for (; i < n && lane != 0; ++i, lane = (lane + 1) % kLanes) {
    const double v = x[i];
    acc[lane] += v * v;
  }
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const double v = x[i + j];
      acc[j] += v * v;
    }
  }
  for (int j = 0; i < n; ++i, ++j) {
    const double v = x[i];
    acc[j] += v * v;
  }
}

// acc (kLanes) += squares of x[i0, n), continuing block_sum_squares' lane
// pattern from offset i0 (a multiple of kLanes); returns the lane sum in order.
double finish_block(double* acc, const float* x, int64_t i0, int64_t n) {
  accumulate_lanes(acc, x + i0, n - i0, /*lane=*/0);
  double s = 0.0;
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  return s;
}

// partial[k] = sum of squares of block k of the group (x[k], n[k] elements).
void group_sum_squares(double* partial, const float* const* x, const int64_t* n) {
  double acc[kGroup][kLanes] = {};
  int64_t common = *std::min_element(n, n + kGroup);
  common -= common % kLanes;
  for (int64_t i = 0; i < common; i += kLanes) {
    for (int64_t k = 0; k < kGroup; ++k) {
      for (int j = 0; j < kLanes; ++j) {
        const double v = x[k][i + j];
        acc[k][j] += v * v;
      }
    }
  }
  for (int64_t k = 0; k < kGroup; ++k) partial[k] = finish_block(acc[k], x[k], common, n[k]);
}

using IntervalList = std::vector<std::pair<int64_t, int64_t>>;

// The intervals of grads read as one concatenated sequence of size().
class Concatenation {
 public:
  Concatenation(const float* grads, const IntervalList& intervals)
      : grads_(grads), intervals_(intervals), starts_(intervals.size() + 1, 0) {
    for (size_t i = 0; i < intervals.size(); ++i) {
      const auto [begin, end] = intervals[i];
      if (begin < 0 || end < begin) {
        throw Error(ExitCode::kInternal,
                    "grad norm: bad interval [" + std::to_string(begin) + ", " + std::to_string(end) + ")");
      }
      starts_[i + 1] = starts_[i] + (end - begin);
    }
  }
  int64_t size() const { return starts_.back(); }

  // The flat data of [v, end) if it lies in one interval, else nullptr (0 <= v < end <= size()).
  const float* contiguous(int64_t v, int64_t end) const {
    const size_t p = locate(v);
    return starts_[p + 1] >= end ? element(p, v) : nullptr;
  }
  // Sum of squares of [begin, end) with block_sum_squares' lane pattern across pieces.
  double block_sum(int64_t begin, int64_t end) const {
    double acc[kLanes] = {};
    for (int64_t v = begin; v < end;) {
      const size_t p = locate(v);
      const int64_t take = std::min(end, starts_[p + 1]) - v;
      accumulate_lanes(acc, element(p, v), take, static_cast<int>((v - begin) % kLanes));
      v += take;
    }
    double s = 0.0;
    for (int j = 0; j < kLanes; ++j) s += acc[j];
    return s;
  }

 private:
  // The interval holding sequence position v < size() (empty intervals skipped).
  size_t locate(int64_t v) const {
    return static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), v) - starts_.begin()) - 1;
  }
  const float* element(size_t p, int64_t v) const { return grads_ + intervals_[p].first + (v - starts_[p]); }

  const float* grads_;
  const IntervalList& intervals_;
  std::vector<int64_t> starts_;  // sequence position of each interval; back() = size()
};

}  // namespace

double grad_norm_sq_intervals(const float* grads, const std::vector<std::pair<int64_t, int64_t>>& intervals) {
  const Concatenation seq(grads, intervals);
  const int64_t n = seq.size();
  if (n <= 0 || profiler::shape_only()) return 0.0;  // a dry run's step: no data
  std::array<double, kBlocks> partial{};
  const int64_t block = (n + kBlocks - 1) / kBlocks;
#pragma omp parallel for schedule(static)
  for (int64_t g = 0; g < kBlocks / kGroup; ++g) {
    // Blocks that each lie in one interval take grad_norm_sq_local's fast
    // lockstep path; a group with a block that spans intervals goes piece by piece.
    const float* x[kGroup];
    int64_t len[kGroup];
    bool contiguous = true;
    for (int64_t k = 0; k < kGroup; ++k) {
      const int64_t begin = std::min(n, (g * kGroup + k) * block);
      len[k] = std::min(n, begin + block) - begin;
      x[k] = len[k] > 0 ? seq.contiguous(begin, begin + len[k]) : grads;
      contiguous = contiguous && (len[k] == 0 || x[k] != nullptr);
    }
    if (contiguous) {
      group_sum_squares(partial.data() + g * kGroup, x, len);
      continue;
    }
    for (int64_t k = 0; k < kGroup; ++k) {
      const int64_t begin = std::min(n, (g * kGroup + k) * block);
      partial[g * kGroup + k] = seq.block_sum(begin, begin + len[k]);
    }
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

double grad_norm_sq_local(const float* grads, int64_t n) {
  if (n <= 0 || profiler::shape_only()) return 0.0;
  std::array<double, kBlocks> partial{};
  const int64_t block = (n + kBlocks - 1) / kBlocks;
#pragma omp parallel for schedule(static)
  for (int64_t g = 0; g < kBlocks / kGroup; ++g) {
    const float* x[kGroup];
    int64_t len[kGroup];
    for (int64_t k = 0; k < kGroup; ++k) {
      const int64_t begin = std::min(n, (g * kGroup + k) * block);
      x[k] = grads + begin;
      len[k] = std::min(n, begin + block) - begin;
    }
    group_sum_squares(partial.data() + g * kGroup, x, len);
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

profiler::Region grad_norm_region(int64_t n) {
  return profiler::memory_kernel("grad_norm_sq", 4.0 * static_cast<double>(n), 2.0 * static_cast<double>(n));
}

double grad_norm_from_sq(double total_sq) { return std::sqrt(total_sq); }

double grad_norm(const float* grads, int64_t n) { return grad_norm_from_sq(grad_norm_sq_local(grads, n)); }

double clip_coefficient(double max_norm, double total_norm) {
  if (!(max_norm > 0.0)) return 1.0;
  const double coeff = max_norm / (total_norm + 1.0e-6);
  return coeff < 1.0 ? coeff : 1.0;  // NaN compares false: no clipping, like Megatron
}

double clip_grads(float* grads, int64_t n, double max_norm, double total_norm) {
  const double coeff = clip_coefficient(max_norm, total_norm);
  if (coeff >= 1.0) return 1.0;
  // Each gradient read and written at fp32 (8 bytes), one multiply.
  profiler::Scope kernel(profiler::memory_kernel("clip_grads", 8.0 * static_cast<double>(n), static_cast<double>(n)));
  if (profiler::shape_only()) return coeff;
  const float c = static_cast<float>(coeff);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) grads[i] *= c;
  return coeff;
}

}  // namespace mtrain::optim
