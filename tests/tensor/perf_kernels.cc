// Performance sanity check (not a test; nothing is asserted): linear layers
// against the raw sgemm rate, flash against unfused attention, fused against
// unfused elementwise kernels. Build: cmake --build <dir> --target perf_kernels
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "common/rng.h"
#include "tensor/attention.h"
#include "tensor/cross_entropy.h"
#include "tensor/linear.h"
#include "tensor/norm.h"

namespace {

using mtrain::Rng;
using namespace mtrain::kernels;

std::vector<float> randn(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.normal());
  return v;
}

// Best-of-reps wall time in milliseconds (after one warm-up call).
double time_ms(const std::function<void()>& fn, int reps = 5) {
  fn();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    best = ms < best ? ms : best;
  }
  return best;
}

void linear_check() {
  const int64_t S = 1024;
  auto a = randn(S * S, 1), b = randn(S * S, 2);
  std::vector<float> c(S * S);
  const double sgemm = time_ms([&] { sgemm_nn(c.data(), a.data(), b.data(), S, S, S); });
  const double sgemm_gf = 2.0 * S * S * S / sgemm / 1e6;
  std::printf("sgemm_nn 1024^3: %.2f ms = %.1f GFLOP/s\n", sgemm, sgemm_gf);

  const int64_t N = 2048, C = 1024, OC = 4096;
  auto inp = randn(N * C, 3), w = randn(OC * C, 4), bias = randn(OC, 5), dout = randn(N * OC, 6);
  std::vector<float> out(N * OC), dinp(N * C), dw(OC * C), db(OC);
  const double flops = 2.0 * N * C * OC;
  const double fwd = time_ms([&] { linear_forward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC); });
  const double bwd =
      time_ms([&] { linear_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC); });
  std::printf(
      "linear N=%ld C=%ld OC=%ld: fwd %.1f ms (%.1f GFLOP/s, %.2fx sgemm rate), bwd %.1f ms (%.1f GFLOP/s, %.2fx)\n", N,
      C, OC, fwd, flops / fwd / 1e6, flops / fwd / 1e6 / sgemm_gf, bwd, 2 * flops / bwd / 1e6,
      2 * flops / bwd / 1e6 / sgemm_gf);
}

void attention_check(int64_t B, int64_t H, int64_t G, int64_t T, int64_t D, bool docs, float p) {
  auto q = randn(B * H * T * D, 7), k = randn(B * G * T * D, 8), v = randn(B * G * T * D, 9);
  auto dout = randn(B * H * T * D, 10);
  std::vector<int32_t> doc(B * T);
  for (int64_t i = 0; i < B * T; ++i) doc[i] = static_cast<int32_t>((i % T) / 100);
  const int32_t* d = docs ? doc.data() : nullptr;
  std::vector<float> out(q.size()), lse(B * H * T), probs(B * H * T * T), dq(q.size()), dk(k.size()), dv(v.size());
  std::vector<float> us(attention_unfused_scratch_floats(B, H, G, T, D)),
      fs(attention_flash_scratch_floats(B, H, G, T, D));
  const double uf = time_ms([&] {
    attention_unfused_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), d, B, H, G, T, D, p, 1, true,
                              us.data());
  });
  const double ub = time_ms([&] {
    attention_unfused_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), probs.data(),
                               d, B, H, G, T, D, p, 1, us.data());
  });
  const double ff = time_ms([&] {
    attention_flash_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), d, B, H, G, T, D, p, 1, fs.data());
  });
  const double fb = time_ms([&] {
    attention_flash_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(),
                             lse.data(), d, B, H, G, T, D, p, 1, fs.data());
  });
  std::printf(
      "attention B=%ld H=%ld G=%ld T=%ld D=%ld docs=%d p=%.1f: unfused fwd %.2f bwd %.2f ms | flash fwd %.2f "
      "bwd %.2f ms | flash/unfused fwd %.2fx bwd %.2fx\n",
      B, H, G, T, D, docs, p, uf, ub, ff, fb, ff / uf, fb / ub);
}

void elementwise_check() {
  const int64_t N = 8192, C = 1024;
  auto x = randn(N * C, 11), w = randn(C, 12), dy = randn(N * C, 13);
  std::vector<float> out(N * C), rstd(N), dx(N * C), dw(C), scratch(rmsnorm_scratch_floats(N, C));
  for (bool fused : {true, false}) {
    const double f = time_ms(
        [&] { rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f, fused, scratch.data()); });
    const double b = time_ms([&] {
      rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C, fused, scratch.data());
    });
    std::printf("rmsnorm %ldx%ld %s: fwd %.2f ms (%.1f GB/s) bwd %.2f ms\n", N, C, fused ? "fused" : "unfused", f,
                2.0 * N * C * 4 / f / 1e6, b);
  }
  const int64_t R = 1024, V = 32000;
  auto logits = randn(R * V, 14);
  std::vector<float> losses(R), stats(2 * R), dl(R, 1.0f), dlogits(R * V), ces(R * V);
  std::vector<int32_t> targets(R, 5);
  for (bool fused : {true, false}) {
    const double f = time_ms([&] {
      cross_entropy_forward(losses.data(), stats.data(), logits.data(), targets.data(), R, V, V, fused, ces.data());
    });
    const double b = time_ms([&] {
      cross_entropy_backward(dlogits.data(), logits.data(), stats.data(), targets.data(), dl.data(), R, V, V, fused,
                             ces.data());
    });
    std::printf("cross_entropy %ldx%ld %s: fwd %.2f ms bwd %.2f ms\n", R, V, fused ? "fused" : "unfused", f, b);
  }
}

}  // namespace

int main() {
  std::printf("OpenMP threads: %d\n", omp_get_max_threads());
  linear_check();
  attention_check(8, 4, 4, 256, 64, false, 0.0f);
  attention_check(8, 4, 2, 256, 64, false, 0.0f);
  attention_check(8, 4, 2, 256, 64, true, 0.1f);
  attention_check(2, 4, 2, 1024, 64, false, 0.0f);
  elementwise_check();
  return 0;
}
