#include "expert_gemm_probe.h"

#include <chrono>
#include <functional>

#include "common/rng.h"
#include "moe/grouped_gemm.h"
#include "sgemm_probe.h"

namespace mtrain::bench {
namespace {

std::vector<float> random_floats(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(rng.next_u64() % 2001) * 1e-3f - 1.0f;
  return v;
}

// Median ms of `reps` calls of f (after one untimed call).
double median_ms(int reps, const std::function<void()>& f) {
  f();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(ms);
}

// One linear of every expert: (M, C) -> (M, OC), weights (OC, C) per expert.
void time_linear(std::vector<ExpertGemmTime>& out, const std::string& name, int64_t experts, int64_t M, int64_t C,
                 int64_t OC, int reps) {
  const std::vector<int64_t> rows(static_cast<size_t>(experts), M / experts);
  const std::vector<float> x = random_floats(M * C, 1), dy = random_floats(M * OC, 2);
  std::vector<std::vector<float>> w, dw;
  std::vector<const float*> wp;
  std::vector<float*> dwp;
  for (int64_t e = 0; e < experts; ++e) {
    w.push_back(random_floats(OC * C, 3 + e));
    dw.emplace_back(static_cast<size_t>(OC * C), 0.f);
  }
  for (int64_t e = 0; e < experts; ++e) {
    wp.push_back(w[e].data());
    dwp.push_back(dw[e].data());
  }
  std::vector<float> y(static_cast<size_t>(M * OC)), dx(static_cast<size_t>(M * C));
  std::vector<float*> no_dw(static_cast<size_t>(experts), nullptr);
  const double gflop = 2.0 * M * OC * C * 1e-9;
  ExpertGemmTime fwd{name + " forward", 0, 0, gflop}, dinp{name + " input grad", 0, 0, gflop},
      dwt{name + " weight grad", 0, 0, gflop};
  for (bool grouped : {true, false}) {
    const double f = median_ms(reps, [&] {
      moe::grouped_linear_forward(y.data(), x.data(), wp.data(), rows.data(), experts, C, OC, grouped);
    });
    const double d = median_ms(reps, [&] {
      moe::grouped_linear_backward(dx.data(), no_dw.data(), dy.data(), x.data(), wp.data(), rows.data(), experts, C, OC,
                                   grouped);
    });
    const double g = median_ms(reps, [&] {
      moe::grouped_linear_backward(nullptr, dwp.data(), dy.data(), x.data(), wp.data(), rows.data(), experts, C, OC,
                                   grouped);
    });
    (grouped ? fwd.grouped_ms : fwd.looped_ms) = f;
    (grouped ? dinp.grouped_ms : dinp.looped_ms) = d;
    (grouped ? dwt.grouped_ms : dwt.looped_ms) = g;
  }
  out.insert(out.end(), {fwd, dinp, dwt});
}

}  // namespace

std::vector<ExpertGemmTime> time_expert_gemms(const model::ModelConfig& c, int64_t tokens, int reps) {
  const int64_t E = c.moe.num_experts, M = tokens * c.moe.router.topk;
  const int64_t fc1 = (c.swiglu ? 2 : 1) * c.moe.ffn;
  std::vector<ExpertGemmTime> out;
  time_linear(out, "fc1", E, M, c.hidden, fc1, reps);
  time_linear(out, "fc2", E, M, c.moe.ffn, c.hidden, reps);
  return out;
}

}  // namespace mtrain::bench
