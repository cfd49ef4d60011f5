// bench_train: how close a full fp32 training step comes to the machine's
// sgemm rate. Measures cblas_sgemm on square matrices, then times complete
// steps (zero grads, forward, backward, grad norm + clip, AdamW) of GPT-2
// small, a tiny Llama and its mixture-of-experts variants (grouped and
// looped expert GEMMs), and prints tokens/s, achieved model GFLOP/s (from
// bench::model_flops, active parameters) and the ratio to the sgemm rate.
// See bench/README.md.
#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "expert_gemm_probe.h"
#include "sgemm_probe.h"
#include "step_bench.h"

namespace {

using mtrain::bench::PhaseMs;
using mtrain::bench::ShapeResult;

struct Flags {
  int threads = 2;
  int steps = 5;
  int warmup = 2;
  int sgemm_size = 2048;
  int sgemm_reps = 9;  // spread over probes before, between and after the shapes
  std::string shape = "all";
  std::string json_path;
};

const char* kFlopsFormula =
    "model FLOPs/step = 6 * matmul_params * tokens + 6 * L * H * D * T * tokens "
    "(fwd+bwd of every linear incl. the LM head, in MoE layers the top-k and shared experts; causal QK^T and PV)";

void set_threads(int n) {
  omp_set_num_threads(n);
  openblas_set_num_threads(n);  // OpenBLAS 0.3.21 sizes its GEMMs from its own count, not omp_set_num_threads
}

const char* blas_parallel_name(int p) { return p == 0 ? "sequential" : (p == 1 ? "pthreads" : "OpenMP"); }

nlohmann::json phases_json(const PhaseMs& p) {
  return {{"forward_ms", p.forward}, {"backward_ms", p.backward},     {"grad_norm_ms", p.grad_norm},
          {"adamw_ms", p.adamw},     {"optimizer_ms", p.optimizer()}, {"total_ms", p.total}};
}

// Tokens/s of each MoE shape with grouped over looped expert GEMMs (the
// shapes named "<base>/grouped" and "<base>/looped").
struct GroupedVsLooped {
  std::string shape;
  double grouped_tokens_per_s = 0, looped_tokens_per_s = 0;
  double speedup() const { return grouped_tokens_per_s / looped_tokens_per_s; }
};

double tokens_per_s(const ShapeResult& r) { return r.tokens_per_step / (r.median.total * 1e-3); }

std::vector<GroupedVsLooped> grouped_vs_looped(const std::vector<ShapeResult>& rs) {
  std::vector<GroupedVsLooped> out;
  const std::string suffix = "/grouped";
  for (const ShapeResult& g : rs) {
    if (!g.name.ends_with(suffix)) continue;
    const std::string base = g.name.substr(0, g.name.size() - suffix.size());
    for (const ShapeResult& l : rs)
      if (l.name == base + "/looped") out.push_back({base, tokens_per_s(g), tokens_per_s(l)});
  }
  return out;
}

void print_results(const std::vector<ShapeResult>& results, double sgemm) {
  fmt::print("\n{:<24} {:>11} {:>9} {:>9} {:>10} {:>9} {:>8}   (median step; best %: the fastest step)\n", "shape",
             "tokens/step", "ms/step", "tokens/s", "GFLOP/s", "% sgemm", "best %");
  for (const ShapeResult& r : results) {
    const double gf = r.flops_per_step / (r.median.total * 1e-3) * 1e-9;
    const double gf_best = r.flops_per_step / (r.best.total * 1e-3) * 1e-9;
    fmt::print("{:<24} {:>11} {:>9.1f} {:>9.0f} {:>10.1f} {:>8.1f}% {:>7.1f}%\n", r.name, r.tokens_per_step,
               r.median.total, r.tokens_per_step / (r.median.total * 1e-3), gf, 100 * gf / sgemm,
               100 * gf_best / sgemm);
  }
  fmt::print(
      "\nper-phase breakdown, ms (median over timed steps; backward includes zeroing the grads;\n"
      "optimizer = grad norm + AdamW, with the clip applied inside the AdamW pass)\n");
  fmt::print("{:<24} {:>9} {:>9} {:>10} {:>9} {:>10} {:>9}\n", "shape", "forward", "backward", "grad_norm", "adamw",
             "optimizer", "total");
  for (const ShapeResult& r : results) {
    const PhaseMs& p = r.median;
    fmt::print("{:<24} {:>9.1f} {:>9.1f} {:>10.1f} {:>9.1f} {:>10.1f} {:>9.1f}\n", r.name, p.forward, p.backward,
               p.grad_norm, p.adamw, p.optimizer(), p.total);
  }
  for (const GroupedVsLooped& g : grouped_vs_looped(results))
    fmt::print("\n{}: grouped expert GEMMs {:.0f} tokens/s, looped {:.0f}: grouped / looped = {:.3f}x", g.shape,
               g.grouped_tokens_per_s, g.looped_tokens_per_s, g.speedup());
  fmt::print("\n\nrerun check (bit-identical for the same --threads and --steps):\n");
  for (const ShapeResult& r : results)
    fmt::print("  {:<24} last loss {:.6f}, grad norm {:.6f}, params hash {:016x}\n", r.name, r.last_loss,
               r.last_grad_norm, r.params_hash);
}

nlohmann::json results_json(const Flags& f, const mtrain::bench::SgemmRate& s, const std::vector<ShapeResult>& rs) {
  nlohmann::json j;
  j["threads"] = f.threads;
  j["steps"] = f.steps;
  j["warmup_steps"] = f.warmup;
  j["flops_formula"] = kFlopsFormula;
  j["sgemm"] = {{"size", s.size},
                {"reference_gflops", s.best_gflops},
                {"best_gflops", s.best_gflops},
                {"median_gflops", s.median_gflops},
                {"reps_gflops", s.gflops}};
  for (const ShapeResult& r : rs) {
    const double gf = r.flops_per_step / (r.median.total * 1e-3) * 1e-9;
    nlohmann::json steps = nlohmann::json::array();
    for (const PhaseMs& p : r.steps) steps.push_back(phases_json(p));
    j["shapes"].push_back({{"name", r.name},
                           {"model", r.description},
                           {"params", r.params},
                           {"matmul_params", r.matmul_params},
                           {"tokens_per_step", r.tokens_per_step},
                           {"flops_per_step", r.flops_per_step},
                           {"ms_per_step", r.median.total},
                           {"tokens_per_s", tokens_per_s(r)},
                           {"gflops", gf},
                           {"fraction_of_sgemm", gf / s.best_gflops},
                           {"best_ms_per_step", r.best.total},
                           {"phases_median", phases_json(r.median)},
                           {"steps", steps},
                           {"last_loss", r.last_loss},
                           {"params_hash", fmt::format("{:016x}", r.params_hash)}});
  }
  for (const GroupedVsLooped& g : grouped_vs_looped(rs))
    j["moe_grouped_vs_looped"].push_back({{"shape", g.shape},
                                          {"grouped_tokens_per_s", g.grouped_tokens_per_s},
                                          {"looped_tokens_per_s", g.looped_tokens_per_s},
                                          {"grouped_over_looped", g.speedup()}});
  return j;
}

// --shape: all, dense (gpt2-small, tiny-llama), moe (both MoE shapes), or one
// shape; an MoE shape runs with grouped and with looped expert GEMMs, one
// after the other.
std::vector<mtrain::bench::ShapeSpec> chosen_shapes(const std::string& s) {
  namespace b = mtrain::bench;
  const bool all = s == "all", dense = all || s == "dense", moe = all || s == "moe";
  std::vector<b::ShapeSpec> out;
  if (dense || s == "gpt2-small") out.push_back(b::gpt2_small());
  if (dense || s == "tiny-llama") out.push_back(b::tiny_llama());
  for (bool grouped : {true, false})
    if (moe || s == "tiny-moe") out.push_back(b::tiny_moe(grouped));
  for (bool grouped : {true, false})
    if (moe || s == "tiny-moe-shared") out.push_back(b::tiny_moe_shared(grouped));
  return out;
}

// The sgemm probe runs before each shape and once after the last, its reps
// spread evenly, so that a quiet moment on a shared machine is likely caught.
struct Measured {
  mtrain::bench::SgemmRate sgemm;
  std::vector<ShapeResult> shapes;
  std::vector<mtrain::bench::ExpertGemmTime> expert_gemms;  // with MoE shapes: one layer's expert GEMMs alone
  int64_t expert_gemm_tokens = 0;
};

// The expert GEMMs of one tiny-moe layer over a step's routed rows, grouped vs looped.
void print_expert_gemms(const std::vector<mtrain::bench::ExpertGemmTime>& t, int64_t tokens) {
  if (t.empty()) return;
  const mtrain::model::MoeSettings moe = mtrain::bench::tiny_moe(true).config.moe;
  const int64_t rows = tokens * moe.router.topk;
  fmt::print("\nexpert GEMMs of one tiny-moe layer alone ({} tokens x top-{} = {} rows, {} per expert), median ms:\n",
             tokens, moe.router.topk, rows, rows / moe.num_experts);
  fmt::print("{:<18} {:>8} {:>8} {:>11} {:>11} {:>15}\n", "gemm", "grouped", "looped", "grouped GF/s", "looped GF/s",
             "grouped/looped");
  for (const auto& g : t)
    fmt::print("{:<18} {:>8.3f} {:>8.3f} {:>11.1f} {:>11.1f} {:>14.2f}x\n", g.gemm, g.grouped_ms, g.looped_ms,
               g.gflop / g.grouped_ms * 1e3, g.gflop / g.looped_ms * 1e3, g.looped_ms / g.grouped_ms);
}

Measured run_all(const Flags& f) {
  mtrain::bench::BenchOptions opts;
  opts.steps = f.steps;
  opts.warmup_steps = f.warmup;
  const std::vector<mtrain::bench::ShapeSpec> specs = chosen_shapes(f.shape);
  const int probes = static_cast<int>(specs.size()) + 1;
  Measured m;
  for (int i = 0; i < probes; ++i) {
    const int reps = f.sgemm_reps / probes + (i < f.sgemm_reps % probes ? 1 : 0);
    if (reps > 0) {
      const mtrain::bench::SgemmRate s = mtrain::bench::measure_sgemm(f.sgemm_size, reps);
      m.sgemm = m.sgemm.gflops.empty() ? s : mtrain::bench::combine(m.sgemm, s);
      fmt::print("sgemm {}^3 probe {}: best {:.1f} GFLOP/s\n", s.size, i + 1, s.best_gflops);
    }
    if (i + 1 == probes) break;
    m.shapes.push_back(mtrain::bench::run_shape(specs[i], opts));
    const ShapeResult& r = m.shapes.back();
    fmt::print("{}: {}; {} params ({} in matmuls), {:.1f} GFLOP/step\n", r.name, r.description, r.params,
               r.matmul_params, r.flops_per_step * 1e-9);
    std::fflush(stdout);
  }
  for (const auto& spec : specs)
    if (spec.config.moe.num_experts > 0) {
      m.expert_gemm_tokens = spec.config.micro_batch * spec.config.seq_length;
      m.expert_gemms =
          mtrain::bench::time_expert_gemms(mtrain::bench::tiny_moe(true).config, m.expert_gemm_tokens, 2 * f.steps + 1);
      break;
    }
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"bench_train: fp32 training-step throughput against the machine's sgemm rate"};
  app.add_option("--threads", f.threads, "OpenMP + OpenBLAS threads")->check(CLI::PositiveNumber);
  app.add_option("--steps", f.steps, "timed training steps per shape")->check(CLI::PositiveNumber);
  app.add_option("--warmup", f.warmup, "untimed warm-up steps per shape")->check(CLI::NonNegativeNumber);
  app.add_option("--sgemm_size", f.sgemm_size, "M = N = K of the sgemm probe")->check(CLI::PositiveNumber);
  app.add_option("--sgemm_reps", f.sgemm_reps, "timed sgemm calls, spread before, between and after the shapes")
      ->check(CLI::PositiveNumber);
  app.add_option("--shape", f.shape, "all | dense | moe | gpt2-small | tiny-llama | tiny-moe | tiny-moe-shared")
      ->check(CLI::IsMember({"all", "dense", "moe", "gpt2-small", "tiny-llama", "tiny-moe", "tiny-moe-shared"}));
  app.add_option("--json", f.json_path, "also write the results as JSON to this file");
  CLI11_PARSE(app, argc, argv);

  set_threads(f.threads);
  fmt::print("threads: {} (omp_get_max_threads {}, OpenBLAS {} build, {})\n", f.threads, omp_get_max_threads(),
             blas_parallel_name(openblas_get_parallel()), openblas_get_config());
  fmt::print("{}\n", kFlopsFormula);
  const Measured m = run_all(f);
  // The best sgemm call is the reference: other jobs on the machine only ever
  // slow a call down, and the higher reference gives the lower ratio.
  fmt::print("\nsgemm {}^3 (reference): best {:.1f} GFLOP/s, median {:.1f} over {} calls\n", m.sgemm.size,
             m.sgemm.best_gflops, m.sgemm.median_gflops, m.sgemm.gflops.size());
  print_results(m.shapes, m.sgemm.best_gflops);
  print_expert_gemms(m.expert_gemms, m.expert_gemm_tokens);
  if (!f.json_path.empty()) {
    std::ofstream out(f.json_path);
    nlohmann::json j = results_json(f, m.sgemm, m.shapes);
    for (const auto& g : m.expert_gemms)
      j["moe_expert_gemms"].push_back(
          {{"gemm", g.gemm}, {"grouped_ms", g.grouped_ms}, {"looped_ms", g.looped_ms}, {"gflop", g.gflop}});
    out << j.dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "bench_train: cannot write %s\n", f.json_path.c_str());
      return 1;
    }
    fmt::print("\nwrote {}\n", f.json_path);
  }
  return 0;
}
