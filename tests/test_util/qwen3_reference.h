// An independent fp64 reference of Hugging Face's Qwen3 forward
// (transformers' modeling_qwen3.py: Qwen3RMSNorm, Qwen3Attention with q_norm /
// k_norm over head_dim applied before apply_rotary_pos_emb with rotate_half,
// repeat_kv for grouped queries, causal softmax(q k^T / sqrt(head_dim)),
// Qwen3MLP down(silu(gate(x)) * up(x)), pre-norm residuals, final norm and
// lm_head), written from those formulas for tests: weights in HF's layout
// (nn.Linear weights are (out, in), row-major) as doubles.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace mtrain::testing {

struct Qwen3RefLayer {
  std::vector<double> input_norm, q_proj, k_proj, v_proj, o_proj, q_norm,
      k_norm;                                                    // (C) (H*D,C) (G*D,C) x2 (C,H*D) (D) (D)
  std::vector<double> post_norm, gate_proj, up_proj, down_proj;  // (C) (F,C) (F,C) (C,F)
};

struct Qwen3RefModel {
  int64_t C = 0, H = 0, G = 0, D = 0, F = 0, V = 0;  // V: the rows of lm_head that count
  double eps = 1e-6, theta = 10000;
  bool qk_norm = true;  // false: Qwen2/Llama attention (the same math without q_norm / k_norm)
  std::vector<double> embed, final_norm, lm_head;  // (V, C) (C) (V, C)
  std::vector<Qwen3RefLayer> layers;
};

namespace qwen3_ref_detail {

// y (n) = W (n, k) x (k)
inline std::vector<double> matvec(const std::vector<double>& W, const double* x, int64_t n, int64_t k) {
  std::vector<double> y(n, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) y[i] += W[i * k + j] * x[j];
  return y;
}

inline void rmsnorm(double* x, const std::vector<double>& w, int64_t n, double eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * r * w[i];
}

// rotate_half RoPE of one head vector at position `pos`.
inline void rope(double* x, int64_t D, double pos, double theta) {
  const int64_t half = D / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double a = pos * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
    const double x1 = x[i], x2 = x[i + half];
    x[i] = x1 * std::cos(a) - x2 * std::sin(a);
    x[i + half] = x2 * std::cos(a) + x1 * std::sin(a);
  }
}

// One decoder layer over the (T, C) hidden states of one sequence.
inline void layer(const Qwen3RefModel& m, const Qwen3RefLayer& L, std::vector<double>& h,
                  const std::vector<int>& positions) {
  const int64_t T = static_cast<int64_t>(positions.size()), C = m.C, H = m.H, G = m.G, D = m.D;
  std::vector<double> q(T * H * D), k(T * G * D), v(T * G * D);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> x(h.begin() + t * C, h.begin() + (t + 1) * C);
    rmsnorm(x.data(), L.input_norm, C, m.eps);
    const auto qt = matvec(L.q_proj, x.data(), H * D, C), kt = matvec(L.k_proj, x.data(), G * D, C);
    const auto vt = matvec(L.v_proj, x.data(), G * D, C);
    std::copy(qt.begin(), qt.end(), q.begin() + t * H * D);
    std::copy(kt.begin(), kt.end(), k.begin() + t * G * D);
    std::copy(vt.begin(), vt.end(), v.begin() + t * G * D);
    for (int64_t j = 0; j < H; ++j) {
      if (m.qk_norm) rmsnorm(&q[(t * H + j) * D], L.q_norm, D, m.eps);
      rope(&q[(t * H + j) * D], D, positions[t], m.theta);
    }
    for (int64_t j = 0; j < G; ++j) {
      if (m.qk_norm) rmsnorm(&k[(t * G + j) * D], L.k_norm, D, m.eps);
      rope(&k[(t * G + j) * D], D, positions[t], m.theta);
    }
  }
  std::vector<double> att(T * H * D, 0.0);
  for (int64_t j = 0; j < H; ++j) {
    const int64_t g = j / (H / G);  // repeat_kv
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> s(t + 1);
      double mx = -INFINITY;
      for (int64_t u = 0; u <= t; ++u) {
        double dot = 0;
        for (int64_t e = 0; e < D; ++e) dot += q[(t * H + j) * D + e] * k[(u * G + g) * D + e];
        s[u] = dot / std::sqrt(static_cast<double>(D));
        mx = std::max(mx, s[u]);
      }
      double z = 0;
      for (double& x : s) z += (x = std::exp(x - mx));
      for (int64_t u = 0; u <= t; ++u)
        for (int64_t e = 0; e < D; ++e) att[(t * H + j) * D + e] += s[u] / z * v[(u * G + g) * D + e];
    }
  }
  for (int64_t t = 0; t < T; ++t) {
    const auto o = matvec(L.o_proj, &att[t * H * D], C, H * D);
    for (int64_t i = 0; i < C; ++i) h[t * C + i] += o[i];
    std::vector<double> x(h.begin() + t * C, h.begin() + (t + 1) * C);
    rmsnorm(x.data(), L.post_norm, C, m.eps);
    auto gate = matvec(L.gate_proj, x.data(), m.F, C);
    const auto up = matvec(L.up_proj, x.data(), m.F, C);
    for (int64_t i = 0; i < m.F; ++i) gate[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
    const auto y = matvec(L.down_proj, gate.data(), C, m.F);
    for (int64_t i = 0; i < C; ++i) h[t * C + i] += y[i];
  }
}

}  // namespace qwen3_ref_detail

// Logits (T, V) of one sequence of `tokens` at `positions`.
inline std::vector<double> qwen3_logits(const Qwen3RefModel& m, const std::vector<int>& tokens,
                                        const std::vector<int>& positions) {
  const int64_t T = static_cast<int64_t>(tokens.size()), C = m.C;
  std::vector<double> h(T * C);
  for (int64_t t = 0; t < T; ++t) std::copy_n(m.embed.begin() + tokens[t] * C, C, h.begin() + t * C);
  for (const Qwen3RefLayer& L : m.layers) qwen3_ref_detail::layer(m, L, h, positions);
  std::vector<double> logits(T * m.V);
  for (int64_t t = 0; t < T; ++t) {
    qwen3_ref_detail::rmsnorm(&h[t * C], m.final_norm, C, m.eps);
    const auto l = qwen3_ref_detail::matvec(m.lm_head, &h[t * C], m.V, C);
    std::copy(l.begin(), l.end(), logits.begin() + t * m.V);
  }
  return logits;
}

// Per-token cross-entropy of the logits (T, V) against `targets`.
inline std::vector<double> cross_entropy(const std::vector<double>& logits, const std::vector<int>& targets,
                                         int64_t V) {
  std::vector<double> out;
  for (size_t t = 0; t < targets.size(); ++t) {
    const double* l = &logits[t * V];
    const double mx = *std::max_element(l, l + V);
    double z = 0;
    for (int64_t i = 0; i < V; ++i) z += std::exp(l[i] - mx);
    out.push_back(mx + std::log(z) - l[targets[t]]);
  }
  return out;
}

}  // namespace mtrain::testing
