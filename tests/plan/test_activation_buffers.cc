// The dry run's activations outside the layers, buffer by buffer, for a
// small config (the demo shape at TP 2 with sequence parallelism, bf16,
// selective recompute, one stage): each named buffer's bytes against its
// shape written out here, and the layers' share against Korthikanti et al.'s
// per-layer formula plus mtrain's named per-layer terms
// (test_memory_fidelity.cc), so the breakdown adds up to the category.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "plan/activation_buffers.h"
#include "plan/dry_run.h"
#include "plan/dry_run_fixture.h"
#include "plan/formula_compare.h"
#include "tensor/attention.h"
#include "tensor/rope.h"

namespace mtrain::plan {
namespace {

int64_t bytes_of(const std::vector<NamedBuffer>& list, const std::string& name) {
  auto it = std::find_if(list.begin(), list.end(), [&](const NamedBuffer& b) { return b.name == name; });
  return it == list.end() ? -1 : it->bytes;
}

// Demo: h 256, 4 heads of 64 (2 query groups), ffn 688 (SwiGLU), 4 layers,
// untied; vocab 512 (padded to a multiple of 128 x TP: 512).
constexpr int64_t kB = 2, kT = 32, kN = kB * kT, kTp = 2, kNl = kN / kTp, kC = 256, kD = 64;
constexpr int64_t kH = 4 / kTp, kG = 2 / kTp, kF = 688 / kTp, kV = 512 / kTp, kLayers = 4;
constexpr int64_t k16 = 2, k32 = 4;  // bytes per bf16 / fp32 element

class ActivationBuffers : public DryRunTest {
 protected:
  DryRun run() {
    args_ = parse(
        "pt --model_preset demo --vocab_size 512 --seq_length 32 --train_iters 1 --micro_batch_size 2 "
        "--global_batch_size 2 --tensor_model_parallel_size 2 --sequence_parallel --recompute_granularity "
        "selective --bf16 --output_dir " +
            out_.string(),
        2);
    return dry_run(args_);
  }
  config::Args args_;
};

TEST_F(ActivationBuffers, EachBufferOutsideTheLayersHasItsShapesBytes) {
  const DryRun r = run();
  const ClassMemory& c = r.classes.at(0);
  const ActivationBreakdown b = activation_breakdown(c.activation_buffers, kNl * kC * k16);
  // Shared by all layers: the backward workspace and the residual gradients.
  EXPECT_EQ(bytes_of(b.shared, "qkv projection"), kN * (kH + 2 * kG) * kD * k16);
  EXPECT_EQ(bytes_of(b.shared, "grad of norm output"), kNl * kC * k16);
  EXPECT_EQ(bytes_of(b.shared, "grad of projection output"), kNl * kC * k16);
  EXPECT_EQ(bytes_of(b.shared, "grad of merged attention"), kN * kH * kD * k16);
  EXPECT_EQ(bytes_of(b.shared, "grad of attention output"), kB * kH * kT * kD * k16);
  EXPECT_EQ(bytes_of(b.shared, "grad of query"), kB * kH * kT * kD * k16);
  EXPECT_EQ(bytes_of(b.shared, "grad of key"), kB * kG * kT * kD * k16);
  EXPECT_EQ(bytes_of(b.shared, "grad of value"), kB * kG * kT * kD * k16);
  EXPECT_EQ(bytes_of(b.shared, "grad of fc1 output"), kN * 2 * kF * k16);
  EXPECT_EQ(bytes_of(b.shared, "grad of activation output"), kN * kF * k16);
  EXPECT_EQ(bytes_of(b.shared, "sequence-parallel gathered input"), kN * kC * k16);
  EXPECT_EQ(bytes_of(b.shared, "sequence-parallel reduce-scatter buffer"), kN * kC * k16);
  // fp32 scratch of the unfused-path kernels: here RoPE's and flash attention's, the larger.
  EXPECT_EQ(bytes_of(b.shared, "kernel scratch"),
            k32 * std::max(kernels::rope_scratch_floats(kB, kH, kT, kD),
                           kernels::attention_flash_scratch_floats(kB, kH, kG, kT, kD)));
  EXPECT_EQ(bytes_of(b.shared, "grad of residual stream"), kNl * kC * k16);
  EXPECT_EQ(bytes_of(b.shared, "grad of final norm output"), kNl * kC * k16);
  EXPECT_EQ(b.shared.size(), 15u);
  // One micro-batch in flight: the stage output and the last stage's loss path.
  EXPECT_EQ(bytes_of(b.per_microbatch, "stage output (last row of the residual stream)"), kNl * kC * k16);
  EXPECT_EQ(bytes_of(b.per_microbatch, "final norm output"), kNl * kC * k16);
  EXPECT_EQ(bytes_of(b.per_microbatch, "final norm rstd"), kNl * k32);
  EXPECT_EQ(bytes_of(b.per_microbatch, "logits"), kN * kV * k32);
  EXPECT_EQ(bytes_of(b.per_microbatch, "cross-entropy statistics"), kN * 2 * k32);
  EXPECT_EQ(bytes_of(b.per_microbatch, "per-token losses"), kN * k32);
  EXPECT_EQ(b.per_microbatch.size(), 6u);
  // The layers: Megatron's sbh(18 + 4 ffn/h)/t per layer plus mtrain's named
  // terms (K, V at g x head dim, SwiGLU fc1, RMSNorm rstd, flash log-sum-exp).
  const double sb = kN, h = kC, t = kTp, ffn = 688;
  const double per_layer =
      sb * h * (18 + 4 * ffn / h) / t + 4 * sb * (2 * kD - h) / t + 2 * sb * ffn / t + 8 * sb / t + 4 * sb * 4 / t;
  EXPECT_EQ(static_cast<double>(b.layers), kLayers * per_layer);
  EXPECT_EQ(b.layers + b.rest(), c.stats.by_category[static_cast<int>(device::MemCategory::kActivations)]);
}

TEST_F(ActivationBuffers, ReportListsTheRestByName) {
  const DryRun r = run();
  const std::string text = formula_comparison(r, args_);
  const ActivationBreakdown b = activation_breakdown(r.classes.at(0).activation_buffers, kNl * kC * k16);
  EXPECT_NE(text.find(fmt::format("the rest, outside the layers: {:.1f} MiB", b.rest() / 1048576.0)), std::string::npos)
      << text;
  for (const char* name : {"logits", "grad of residual stream", "stage output (last row of the residual stream)"})
    EXPECT_NE(text.find(name), std::string::npos) << name << "\n" << text;
}

TEST(ActivationBreakdown, SlotsAndTheRecomputeBufferAreGrouped) {
  const std::map<std::string, int64_t> live = {{"chunk 0 slot 0 residual stream (per layer input)", 3 * 100},
                                               {"chunk 0 slot 1 residual stream (per layer input)", 3 * 100},
                                               {"chunk 0 slot 0 logits", 40},
                                               {"chunk 0 slot 1 logits", 40},
                                               {"layer slot 0 query", 7},
                                               {"layer slot 1 query", 7},
                                               {"recompute buffer query", 5},
                                               {"kernel scratch", 9}};
  const ActivationBreakdown b = activation_breakdown(live, 100);
  EXPECT_EQ(b.layers, 2 * 200 + 14);
  EXPECT_EQ(b.per_microbatch,
            (std::vector<NamedBuffer>{{"stage output (last row of the residual stream)", 200, 2}, {"logits", 80, 2}}));
  EXPECT_EQ(b.shared, (std::vector<NamedBuffer>{{"kernel scratch", 9, 1}, {"recompute buffer query", 5, 1}}));
  EXPECT_EQ(b.rest(), 200 + 80 + 14);
}

}  // namespace
}  // namespace mtrain::plan
