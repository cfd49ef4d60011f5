// bench_infer: generation throughput with and without the KV cache
// (infer/inference_session.h). A tiny Llama (bench_train's shape, context
// 256) with random weights answers a 16-token prompt greedily until the
// context is full (240 new tokens); tokens/s of both paths, their ratio, and
// the cached path's achieved GFLOP/s over this machine's sgemm rate (decode
// is matrix-vector work: far below the sgemm rate by nature). See bench/README.md.
#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <vector>

#include "device/device.h"
#include "infer/inference_session.h"
#include "model/gpt.h"
#include "sgemm_probe.h"
#include "shapes.h"

namespace {

using mtrain::infer::GenerationConfig;

// FLOPs of decoding one token at position p: 2 per weight of every linear
// (LM head included) plus causal attention over p+1 keys (QK^T and PV).
double decode_flops(const mtrain::model::ModelConfig& c, int64_t p) {
  const double qkv = static_cast<double>(c.hidden) * (c.heads + 2 * c.groups) * c.head_dim;
  const double per_layer = qkv + static_cast<double>(c.heads) * c.head_dim * c.hidden + 3.0 * c.hidden * c.ffn;
  return 2.0 * (c.num_layers * per_layer + static_cast<double>(c.hidden) * c.padded_vocab) +
         4.0 * c.num_layers * c.heads * c.head_dim * static_cast<double>(p + 1);
}

struct Timed {
  double seconds = 0;
  int64_t tokens = 0;
};

Timed run(mtrain::infer::InferenceSession& s, const std::vector<int32_t>& prompt, bool cache, int reps) {
  GenerationConfig g;
  g.max_new_tokens = 1 << 20;  // until the context is full
  g.use_cache = cache;
  std::vector<double> secs;
  Timed t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    t.tokens = static_cast<int64_t>(s.generate(prompt, g).size());
    secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  t.seconds = mtrain::bench::median(secs);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, reps = 3;
  CLI::App app{"bench_infer: tokens/s of generation with and without the KV cache"};
  app.add_option("--threads", threads, "OpenMP / OpenBLAS threads");
  app.add_option("--reps", reps, "timed generations per path (the median is reported)");
  CLI11_PARSE(app, argc, argv);
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);

  mtrain::model::ModelConfig c = mtrain::bench::tiny_llama().config;
  c.micro_batch = 1;
  mtrain::device::Device dev(mtrain::device::DeviceProfile{}, 0);
  mtrain::model::GptModel model(c, dev);
  mtrain::infer::InferenceSession session(model, dev);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 16; ++i) prompt.push_back((i * 37 + 11) % static_cast<int32_t>(c.vocab));

  const mtrain::bench::SgemmRate sgemm = mtrain::bench::measure_sgemm(1024, 5);
  const Timed cached = run(session, prompt, true, reps);
  const Timed full = run(session, prompt, false, reps);
  double flops = 0;
  for (int64_t i = 0; i < cached.tokens; ++i) flops += decode_flops(c, static_cast<int64_t>(prompt.size()) + i);
  const double gflops = flops / cached.seconds / 1e9;
  fmt::print("bench_infer: tiny-llama (L={}, C={}, context {}), {} threads, prompt {} tokens, {} new tokens\n",
             c.num_layers, c.hidden, c.seq_length, threads, prompt.size(), cached.tokens);
  fmt::print("  sgemm 1024^3: {:.1f} GFLOP/s (median)\n", sgemm.median_gflops);
  fmt::print("  KV cache:        {:8.1f} tokens/s  ({:.2f} GFLOP/s = {:.3f} of sgemm)\n",
             cached.tokens / cached.seconds, gflops, gflops / sgemm.median_gflops);
  fmt::print("  full recompute:  {:8.1f} tokens/s\n", full.tokens / full.seconds);
  fmt::print("  speedup of the cache: {:.1f}x\n", full.seconds / cached.seconds);
  return 0;
}
