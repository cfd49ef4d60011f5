#include "sgemm_probe.h"

#include <algorithm>
#include <chrono>

#include "common/rng.h"
#include "tensor/linear.h"

namespace mtrain::bench {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

SgemmRate combine(const SgemmRate& a, const SgemmRate& b) {
  SgemmRate r = a;
  r.gflops.insert(r.gflops.end(), b.gflops.begin(), b.gflops.end());
  r.best_gflops = r.gflops.empty() ? 0 : *std::max_element(r.gflops.begin(), r.gflops.end());
  r.median_gflops = median(r.gflops);
  return r;
}

SgemmRate measure_sgemm(int64_t size, int reps) {
  const int64_t n = size * size;
  std::vector<float> a(n), b(n), c(n);  // (size, size) each
  Rng rng(7);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(rng.uniform() - 0.5);
    b[i] = static_cast<float>(rng.uniform() - 0.5);
  }
  const double flops = 2.0 * static_cast<double>(size) * static_cast<double>(size) * static_cast<double>(size);
  kernels::sgemm_nn(c.data(), a.data(), b.data(), size, size, size);  // warm-up: pages, OpenBLAS buffers, threads
  SgemmRate r;
  r.size = size;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    kernels::sgemm_nn(c.data(), a.data(), b.data(), size, size, size);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.gflops.push_back(flops / s * 1e-9);
  }
  r.best_gflops = *std::max_element(r.gflops.begin(), r.gflops.end());
  r.median_gflops = median(r.gflops);
  return r;
}

}  // namespace mtrain::bench
