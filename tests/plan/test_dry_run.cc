// The dry run predicts the real run: for small demo layouts, the real run's
// recorded device accounting (ranks as threads of a SimWorld, real data, real
// math, two iterations) equals, byte for byte and category by category, the
// shape-only construction of the rank class that stands for it. Also: the
// report's verdict, the exit-6 message of a plan that does not fit, and a
// 7B-scale plan that allocates nothing on the host.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/errors.h"
#include "plan/dry_run.h"
#include "plan/dry_run_fixture.h"
#include "plan/memory_report.h"
#include "plan/plan_args.h"
#include "plan/sim_trace.h"
#include "plan/step_time.h"
#include "train/run.h"

namespace mtrain::plan {
namespace {

namespace fs = std::filesystem;
using device::MemCategory;

using Layout = LayoutCase;

class RealAgrees : public DryRunTest, public ::testing::WithParamInterface<Layout> {};

TEST_P(RealAgrees, PeakMemoryByCategory) {
  const Layout& l = GetParam();
  const config::Args args = parse(demo(l.flags), l.ranks);
  const std::vector<device::MemoryStats> real = run_real(args, l.ranks);
  const DryRun dry = dry_run(args);
  std::vector<bool> covered(l.ranks, false);
  for (const ClassMemory& c : dry.classes) {
    for (int rank : c.rank_class.ranks) {
      covered[rank] = true;
      const device::MemoryStats& r = real[rank];
      ASSERT_GT(r.max_allocated, 0) << "rank " << rank << " recorded nothing";
      EXPECT_EQ(c.stats.max_allocated, r.max_allocated) << "rank " << rank;
      EXPECT_EQ(c.stats.max_reserved, r.max_reserved) << "rank " << rank;
      EXPECT_EQ(c.stats.max_host, r.max_host) << "rank " << rank << ": the host RAM of the real fp32 tensors";
      for (int k = 0; k < static_cast<int>(MemCategory::kCount); ++k)
        EXPECT_EQ(c.stats.by_category[k], r.by_category[k])
            << "rank " << rank << ", " << device::mem_category_name(static_cast<MemCategory>(k));
      // What the runtime holds beside the allocator: the same communicators set up, the same bytes.
      // fp16: the real run's first steps overflow and skip the gradient norm, whose communicator
      // a later step sets up; the dry step never skips and holds it already.
      for (int k = 0; k < static_cast<int>(device::RuntimeKind::kCount); ++k) {
        const auto kind = static_cast<device::RuntimeKind>(k);
        if (args.fp16 && kind == device::RuntimeKind::kCollectiveBuffers) {
          EXPECT_GE(c.stats.runtime[k], r.runtime[k]) << "rank " << rank;
        } else {
          EXPECT_EQ(c.stats.runtime[k], r.runtime[k]) << "rank " << rank << ", " << device::runtime_kind_name(kind);
        }
      }
      if (!args.fp16) {
        EXPECT_EQ(c.stats.communicators, r.communicators) << "rank " << rank;
      }
    }
  }
  for (int rank = 0; rank < l.ranks; ++rank) EXPECT_TRUE(covered[rank]) << "rank " << rank << " in no class";
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, RealAgrees,
    ::testing::Values(
        Layout{"single", 1, ""}, Layout{"tp2_sp", 2, "--tensor_model_parallel_size 2 --sequence_parallel"},
        Layout{"pp2", 2, "--pipeline_model_parallel_size 2"},
        Layout{"pp2_uneven_bf16", 2, "--pipeline_model_parallel_size 2 --decoder_first_pipeline_num_layers 1 --bf16"},
        Layout{"tp2_pp2_tied_fp16", 4,
               "--tensor_model_parallel_size 2 --pipeline_model_parallel_size 2 "
               "--untie_embeddings_and_output_weights false --fp16"},
        Layout{"dp2_no_distopt", 2, "--use_distributed_optimizer false"},
        Layout{"dp2_distopt", 2, "--use_distributed_optimizer"},
        // Megatron's bf16 main grads: the gradient buffer at 2 bytes a parameter.
        Layout{"dp2_distopt_bf16_grads", 2, "--use_distributed_optimizer --bf16 --grad_reduce_in_bf16"},
        // The logged norms' collectives (a dry step has no gradients to count: the same sums over nothing).
        Layout{"dp2_logged_norms", 2, "--use_distributed_optimizer --log_num_zeros_in_grad --log_params_norm"},
        Layout{"full_recompute_block", 1,
               "--recompute_granularity full --recompute_method block --recompute_num_layers 1"},
        Layout{"selective_recompute_unfused", 1, "--recompute_granularity selective --attention_backend unfused"},
        Layout{"tp2_pp2_interleaved_recompute", 4,
               "--tensor_model_parallel_size 2 --pipeline_model_parallel_size 2 "
               "--num_layers_per_virtual_pipeline_stage 1 --recompute_granularity full "
               "--recompute_method uniform --recompute_num_layers 1"},
        // Context parallelism: 1/CP of the activations plus the ring's K/V
        // blocks in flight or Ulysses' all-to-all blocks (comm buffers).
        Layout{"cp2_ring", 2, "--context_parallel_size 2"},
        Layout{"cp2_ulysses_dp2", 4, "--context_parallel_size 2 --context_parallel_algo ulysses_cp_algo"},
        // MoE: the expert buffers are charged for the planned rows. Padded to the capacity every
        // expert gets exactly its capacity from each sender; planned for the worst case (imbalance =
        // EP) no routing brings more. Either way real routing changes nothing the device holds.
        Layout{"moe_ep2_capacity_padded", 2,
               "--model_preset demo-moe --expert_model_parallel_size 2 --moe_expert_capacity_factor 1 "
               "--moe_pad_expert_input_to_capacity"},
        Layout{"moe_ep2_worst_case", 2,
               "--model_preset demo-moe --expert_model_parallel_size 2 --moe_routing_imbalance 2"}),
    [](const ::testing::TestParamInfo<Layout>& i) { return std::string(i.param.name); });

// The interleaved schedule's activations as Megatron holds them: stage s of
// PP 8 x VP 12 keeps min((8 - s - 1) * 2 + 11 * 8, M v) + 1 micro-batch
// chunks in flight (warm-up + 1; 103 on stage 0), its chunks sharing one
// pool; the last stage's loss chunk has a pool of its own (its logits).
TEST_F(DryRunTest, InterleavedStagesHoldMegatronsInFlightChunks) {
  const DryRun r = dry_run(parse(demo("--num_layers 96 --pipeline_model_parallel_size 8 "
                                      "--num_layers_per_virtual_pipeline_stage 1 --global_batch_size 32"),
                                 8));
  ASSERT_EQ(r.microbatches, 16);
  for (const ClassMemory& c : r.classes) {
    const int s = c.rank_class.stage;
    const int warmup = std::min((8 - s - 1) * 2 + 11 * 8, 16 * 12);
    if (s < 7) {
      EXPECT_EQ(c.activation_slots, warmup + 1) << "stage " << s;
    } else {
      // The loss chunk (chunk 11) alone: its forwards start after the 88 warm-up forwards of chunks
      // 0-10 and each is followed by its backward (1 slot); the other pool reaches 88 + 1.
      EXPECT_EQ(c.activation_slots, warmup + 2) << "stage " << s;
    }
  }
}

// --profile --dry_run's trace: per stage a memory counter track, from what
// the stage holds beside its activation slots, up by one slot at each
// micro-batch's forward and down at its backward's end: it reaches the
// report's peak on the device when the schedule has every slot in flight
// (1F1B stage s of 2: 2 - s) and ends where it began.
TEST_F(DryRunTest, TheSimulatedTraceCarriesAMemoryTrackPerStage) {
  const DryRun r = dry_run(parse(demo("--pipeline_model_parallel_size 2"), 2));
  const nlohmann::json doc = nlohmann::json::parse(simulated_trace(r, step_time(r)));
  for (const ClassMemory& c : r.classes) {
    const int s = c.rank_class.stage;
    const std::string track = "stage " + std::to_string(s) + " memory on the device (GiB)";
    std::vector<double> v;
    for (const auto& e : doc["traceEvents"])
      if (e["ph"] == "C" && e["name"] == track) v.push_back(e["args"]["GiB"].get<double>());
    const double gib = 1 << 30, peak = static_cast<double>(class_peak(c)) / gib;
    const double slot = static_cast<double>(c.chunk_slot_bytes.at(0)) / gib;
    ASSERT_EQ(c.activation_slots, 2 - s);
    // The start, then each forward's begin and backward's end (those at one instant, one sample).
    ASSERT_GE(v.size(), 1u + r.microbatches) << track;
    ASSERT_LE(v.size(), 1u + 2 * r.microbatches) << track;
    EXPECT_DOUBLE_EQ(v.front(), peak - (2 - s) * slot) << track;
    EXPECT_NEAR(*std::max_element(v.begin(), v.end()), peak, 1e-12 * peak) << track;
    EXPECT_NEAR(v.back(), v.front(), 1e-12 * peak) << track;
  }
}

TEST_F(DryRunTest, ReportsFitsAndNamesTheRanksOfEachClass) {
  const DryRun r = dry_run(parse(demo("--pipeline_model_parallel_size 2 --use_distributed_optimizer"), 4));
  ASSERT_EQ(r.classes.size(), 4u);  // 2 stages x 2 DP ranks (distributed optimizer shards)
  EXPECT_EQ(ranks_text(r.classes[3].rank_class.ranks), "3");
  EXPECT_TRUE(plan_fits(r));
  // Megatron's rank order (tp-cp-ep-dp-pp): stage 1 is ranks 2-3; the report
  // shows each stage once, naming both shards' ranks.
  const std::string text = memory_report(r);
  EXPECT_NE(text.find("pipeline stage 1: simulated rank "), std::string::npos) << text;
  EXPECT_NE(text.find("stands for ranks 2-3\n  (2 distributed-optimizer shards simulated"), std::string::npos) << text;
  EXPECT_NE(text.find("FITS"), std::string::npos);
  EXPECT_EQ(text.find("DOES NOT FIT"), std::string::npos) << text;
}

// Balanced routing is the plan, not a promise: a real micro-batch whose
// routing brings an EP rank more rows than its balanced share holds them as
// their own allocation while it runs. Over two ranks, four layers and four
// micro-batches routing is never exactly even, so some rank's real peak is
// above the dry run's; none is above the peak if routing collapses.
TEST_F(DryRunTest, MoeRowsBeyondTheBalancedPlanAreHeldInARealRun) {
  const config::Args args = parse(demo("--model_preset demo-moe --expert_model_parallel_size 2 --max_length 32 "
                                       "--seq_length 32 --truncation_strategy right"),
                                  2);
  const std::vector<device::MemoryStats> real = run_real(args, 2);
  const DryRun dry = dry_run(args);
  int above = 0;
  for (const ClassMemory& c : dry.classes) {
    ASSERT_GT(c.stats.contingent, 0) << "the host's worst case beyond the device's charge";
    for (int rank : c.rank_class.ranks) {
      EXPECT_GE(real[rank].max_allocated, c.stats.max_allocated) << "rank " << rank;
      EXPECT_LE(real[rank].max_allocated, c.stats.max_allocated + c.stats.contingent) << "rank " << rank;
      above += real[rank].max_allocated > c.stats.max_allocated;
    }
  }
  EXPECT_GE(above, 1);
  const std::string text = memory_report(dry);
  EXPECT_NE(text.find("  expert buffers planned for balanced routing (--moe_routing_imbalance 1)\n"
                      "  if routing collapses onto these experts "),
            std::string::npos)
      << text;
}

// What the device holds beside the allocator is in the plan's peak: the
// 910B's own reservation and CANN's context (configs/devices/Ascend910B3.yaml),
// and 2 x HCCL_BUFFSIZE for each communicator the step uses (the variable
// honoured); a plan whose allocator peak fits but not beside them does not fit.
TEST_F(DryRunTest, RuntimeMemoryIsInThePeakOnTheDevice) {
  const std::string flags =
      demo("--tensor_model_parallel_size 2 --context_parallel_size 2 --use_distributed_optimizer");
  const DryRun r = dry_run(parse(flags, 8));
  constexpr int64_t kMiB = 1 << 20;
  for (const ClassMemory& c : r.classes) {
    // TP (SP collectives), CP (the ring), DP x CP (the distributed optimizer), world (grad norm, overflow check).
    EXPECT_EQ(c.communicators, (std::vector<std::string>{"cp", "dp-cp", "tp", "world"}));
    EXPECT_EQ(c.stats.runtime[static_cast<int>(device::RuntimeKind::kCollectiveBuffers)], 4 * 2 * 200 * kMiB);
    EXPECT_EQ(class_peak(c), c.stats.max_reserved + (3380 + 199 + 1600) * kMiB);
  }
  const std::string text = memory_report(r);
  EXPECT_NE(text.find("  held outside the allocator:\n    reserved by the device                       3.30 GiB\n"
                      "    runtime context                              0.19 GiB\n"
                      "    collective buffers                           1.56 GiB\n"
                      "      4 communicators (cp, dp-cp, tp, world), 2 x HCCL_BUFFSIZE (200 MB) each\n"
                      "  peak on the device "),
            std::string::npos)
      << text;
  ASSERT_EQ(setenv("HCCL_BUFFSIZE", "50", 1), 0);
  const DryRun small = dry_run(parse(flags, 8));
  unsetenv("HCCL_BUFFSIZE");
  EXPECT_EQ(small.classes[0].stats.runtime[static_cast<int>(device::RuntimeKind::kCollectiveBuffers)],
            4 * 2 * 50 * kMiB);
  EXPECT_NE(memory_report(small).find("2 x HCCL_BUFFSIZE (50 MB) each"), std::string::npos);
  // 1 GiB of HBM: the allocator's 0.05 GiB fit, not beside 1000 MiB reserved and four 2 x 10 MiB communicators.
  fs::create_directories(out_);
  const fs::path profile = out_ / "small.yaml";
  std::ofstream(profile) << "hbm_mib: 1024\npeak_tflops_16bit: 294.9\npeak_tflops_fp32: 73.7\nhbm_gbps: 1600\n"
                            "runtime:\n  device_reserved_mib: 1000\n  collective_library: hccl\n"
                            "  hccl_buffsize_mb: 10\n";
  const config::Args tight = parse(flags + " --device_profile " + profile.string(), 8);
  const DryRun t = dry_run(tight);
  EXPECT_LT(t.classes[0].stats.max_reserved, 1024 * kMiB);
  EXPECT_EQ(class_peak(t.classes[0]), t.classes[0].stats.max_reserved + 1080 * kMiB);
  EXPECT_FALSE(plan_fits(t));
  EXPECT_NE(memory_report(t).find("DOES NOT FIT"), std::string::npos);
  try {
    require_fit(t, tight);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("(1.05 GiB of it held outside the allocator: runtime, collective buffers)"),
              std::string::npos)
        << e.what();
  }
}

// The host RAM a real run needs (its tensors' fp32 storage) is known
// shape-only: a machine without it is refused before anything is allocated,
// saying how much the ranks on it need.
TEST_F(DryRunTest, HostNeedIsKnownBeforeAllocating) {
  const DryRun r = dry_run(parse(demo("--tensor_model_parallel_size 2"), 2));
  const int64_t one = host_need(r, {0}), both = host_need(r, {0, 1});
  // At least the fp32 weights, gradients and Adam states of the rank's 1.7e6 parameters.
  EXPECT_GE(one, 16 * r.classes[0].parameters);
  EXPECT_EQ(both, 2 * one);  // TP shards are alike
  EXPECT_NO_THROW(require_host_fit(r, {0, 1}, both));
  EXPECT_NO_THROW(require_host_fit(r, {0, 1}, -1));  // unknown: no check
  try {
    require_host_fit(r, {0, 1}, both - 1);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(std::string(e.what()), fmt::format("host out of memory: the run's 2 ranks on this machine need {} MiB of "
                                                 "RAM for the real fp32 tensors of the simulated NPUs, only {} MiB are "
                                                 "available",
                                                 both >> 20, (both - 1) >> 20));
    EXPECT_NE(e.hint().find("--dry_run"), std::string::npos);
  }
}

// The pipeline's receive buffers are on the device as communication buffers:
// one message of s b h at the wire dtype (s / t with SP) where a stage
// receives activations (all but the first) and one where it receives
// gradients (all but the last); interleaved, every stage receives both.
TEST_F(DryRunTest, PipelineReceiveBuffersAreOneMessageEach) {
  struct Case {
    const char* flags;
    int ranks;
    int64_t bytes, s_shards, per_stage;  // wire bytes, SP's split of s, buffers per stage
  };
  const Case cases[] = {
      {"--bf16", 1, 2, 1, 0},
      {"--pipeline_model_parallel_size 2 --bf16", 2, 2, 1, 1},
      {"--pipeline_model_parallel_size 2", 2, 4, 1, 1},
      {"--pipeline_model_parallel_size 2 --tensor_model_parallel_size 2 --sequence_parallel --bf16", 4, 2, 2, 1},
      {"--pipeline_model_parallel_size 2 --num_layers_per_virtual_pipeline_stage 1 --bf16", 2, 2, 1, 2},
  };
  for (const Case& k : cases) {
    const DryRun r = dry_run(
        parse("pt --model_preset demo --tokenizer configs/demo/tokenizer.json --seq_length 32 --micro_batch_size 2 "
              "--global_batch_size 8 --train_iters 1 --output_dir " +
                  out_.string() + " " + k.flags,
              k.ranks));
    const int64_t s = 32, b = 2, h = r.whole_model.hidden;
    for (const ClassMemory& c : r.classes)
      EXPECT_EQ(c.stats.by_category[static_cast<int>(MemCategory::kCommBuffers)],
                k.per_stage * (s / k.s_shards) * b * h * k.bytes)
          << k.flags << ", stage " << c.rank_class.stage;
  }
}

// Llama-2-7B on one 8-NPU node: the plan is built shape-only (no host
// storage) and, without the distributed optimizer, does not fit 64 GiB at
// DP 8: the error names the stage, the dominant category and a change whose
// own dry run fits.
TEST_F(DryRunTest, SevenBillionOnEightNpusWithoutHostMemory) {
  const std::string flags =
      "pt --model_preset llama2-7b --bf16 --seq_length 4096 --micro_batch_size 1 --global_batch_size 64 "
      "--train_iters 1 --lr_warmup_iters 0 --vocab_size 32000 --recompute_granularity selective "
      "--use_distributed_optimizer false --output_dir " +
      out_.string();
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  const config::Args args = parse(flags, 8);
  const DryRun r = dry_run(args);
  ASSERT_EQ(r.classes.size(), 1u);
  EXPECT_EQ(ranks_text(r.classes[0].rank_class.ranks), "0-7");
  // Megatron's formula (estimator-formulas.md §1b): 6.74e9 parameters, bf16
  // weights (2 B) + fp32 main grads (4 B) + fp32 master, m and v (12 B) per
  // parameter on every DP replica; the flat buffers are padded for the
  // buckets, so the bytes are at least that and within 0.1% of it.
  const ClassMemory& c = r.classes[0];
  const double params = static_cast<double>(c.parameters);
  EXPECT_NEAR(params, 6.74e9, 0.01e9);
  const double w = static_cast<double>(c.stats.by_category[static_cast<int>(MemCategory::kWeights)]);
  const double g = static_cast<double>(c.stats.by_category[static_cast<int>(MemCategory::kGrads)]);
  const double o = static_cast<double>(c.stats.by_category[static_cast<int>(MemCategory::kOptimizer)]);
  EXPECT_GE(w, 2 * params);
  EXPECT_NEAR(w / (2 * params), 1.0, 1e-3);
  EXPECT_NEAR(g / (4 * params), 1.0, 1e-3);
  EXPECT_NEAR(o / (12 * params), 1.0, 1e-3);
  EXPECT_FALSE(plan_fits(r));
  try {
    require_fit(r, args);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("pipeline stage 0 (ranks 0-7)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("the largest part is optimizer states"), std::string::npos) << msg;
    EXPECT_NE(msg.find("short by"), std::string::npos) << msg;
    // 18 B/param (113 GiB) at DP 8. Alone, the distributed optimizer leaves
    // 6 + 12/8 B/param (47 GiB) plus ~17 GiB of selective-recompute
    // activations (34sbh per layer, Korthikanti et al.): over 64 GiB; full
    // recompute leaves the 113 GiB; PP 2 or TP 2 leave 56 GiB of states
    // beside 17 or 8.5 GiB of activations. PP 4 (28 GiB of states, stage 0
    // holding 4 micro-batches of its 8 layers: 17 GiB) and TP 4 (28 + 4) fit;
    // the hint names the faster by the simulated step, with its peak.
    const std::string prefix =
        "the cheapest change that fits (dry-run checked; the fastest of those that fit): "
        "--pipeline_model_parallel_size 4 (peak ";
    ASSERT_EQ(e.hint().rfind(prefix, 0), 0u) << e.hint();
    const double peak_gib = std::stod(e.hint().substr(prefix.size()));
    config::Args pp4 = parse(flags + " --pipeline_model_parallel_size 4", 8);
    const DryRun fixed = dry_run(pp4);
    EXPECT_TRUE(plan_fits(fixed));
    int64_t peak = 0;
    for (const ClassMemory& k : fixed.classes) peak = std::max(peak, class_peak(k));
    EXPECT_NEAR(peak_gib, static_cast<double>(peak) / (1LL << 30), 0.005);
    EXPECT_FALSE(plan_fits(dry_run(parse(flags + " --use_distributed_optimizer", 8))));
    EXPECT_TRUE(plan_fits(dry_run(parse(flags + " --tensor_model_parallel_size 4", 8))));
  }
  // Bookkeeping only: the planned device holds > 100 GiB, the host grew by
  // far less than one fp32 copy of the weights (27 GB) would take.
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 512L * 1024) << "max RSS grew in KiB";
}

// A micro-batch far too large: the hint halves it down to the largest that
// fits (the global batch kept), not "nothing fits": Llama-2-7B at TP 8 + SP
// holds ~2.36 GiB of activations per sample of 4096 tokens (151 GiB at 64),
// 14 GiB of states, so 32 samples do not fit in 64 GiB and 16 do.
TEST_F(DryRunTest, AHugeMicroBatchGetsTheLargestThatFits) {
  const std::string flags =
      "pt --model_preset llama2-7b --bf16 --seq_length 4096 --global_batch_size 64 --tensor_model_parallel_size 8 "
      "--sequence_parallel --recompute_granularity none --train_iters 1 --lr_warmup_iters 0 --output_dir " +
      out_.string();
  const config::Args args = parse(flags + " --micro_batch_size 64", 8);
  const DryRun r = dry_run(args);
  ASSERT_FALSE(plan_fits(r));
  try {
    require_fit(r, args);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string prefix =
        "the cheapest change that fits (dry-run checked; the fastest of those that fit): --micro_batch_size 16 (peak ";
    ASSERT_EQ(e.hint().rfind(prefix, 0), 0u) << e.hint();
    EXPECT_FALSE(plan_fits(dry_run(parse(flags + " --micro_batch_size 32", 8))));
    const DryRun sixteen = dry_run(parse(flags + " --micro_batch_size 16", 8));
    ASSERT_TRUE(plan_fits(sixteen));
    EXPECT_NEAR(std::stod(e.hint().substr(prefix.size())),
                static_cast<double>(class_peak(sixteen.classes[0])) / (1LL << 30), 0.005);
  }
}

// Megatron-LM's theoretical_memory_usage.py (estimator-formulas.md §1b,
// current form) for Llama-2-7B: h 4096, ffn 11008, a = g = 32 (r_q = 1),
// SwiGLU (m = 3/2), RMSNorm (n = 1), 32 layers, untied, p = 1. Returns the
// most loaded shard's parameter count at TP t with the padded vocabulary.
int64_t megatron_llama2_7b_shard(int64_t t) {
  const int64_t h = 4096, ffn = 11008, L = 32, n = 1;
  const int64_t v_pad = (32000 + 128 * t - 1) / (128 * t) * (128 * t);  // make_vocab_size_divisible_by 128
  const int64_t attn = 2 * h * h * 2;                                   // 2h^2 (1 + g/a) r_q
  const int64_t dense = 2 * h * (ffn * 3 / 2 + n) + attn;
  const int64_t block = dense * L + n * h;
  return (block + v_pad * h) / t + v_pad * h / t;  // + the untied output layer (p == 1)
}

double category_bytes(const ClassMemory& c, MemCategory k) {
  return static_cast<double>(c.stats.by_category[static_cast<int>(k)]);
}
double state_bytes(const ClassMemory& c) {
  return category_bytes(c, MemCategory::kWeights) + category_bytes(c, MemCategory::kGrads) +
         category_bytes(c, MemCategory::kOptimizer);
}

TEST_F(DryRunTest, WeightsGradsAndOptimizerMatchMegatronsTheoreticalMemory) {
  const std::string base =
      "pt --model_preset llama2-7b --bf16 --seq_length 4096 --global_batch_size 64 --train_iters 1 "
      "--lr_warmup_iters 0 --output_dir " +
      out_.string();
  // DP 8 without the distributed optimizer: 18 bytes per parameter.
  const DryRun dp8 = dry_run(parse(base + " --use_distributed_optimizer false", 8));
  const ClassMemory& a = dp8.classes.at(0);
  EXPECT_EQ(a.parameters, megatron_llama2_7b_shard(1));
  const double p1 = static_cast<double>(megatron_llama2_7b_shard(1));
  // mtrain pads the flat buffers for the DP buckets (a few KiB here): the
  // only difference, relative 1e-6 at most.
  EXPECT_GE(state_bytes(a), 18 * p1);
  EXPECT_NEAR(state_bytes(a) / (18 * p1), 1.0, 1e-6);
  // DP 8 with it: 6 + 12/8 bytes per parameter on every shard.
  const DryRun dist = dry_run(parse(base + " --use_distributed_optimizer true", 8));
  ASSERT_EQ(dist.classes.size(), 8u);
  for (const ClassMemory& c : dist.classes) EXPECT_NEAR(state_bytes(c) / (7.5 * p1), 1.0, 1e-6) << c.dp_rank;
  // TP 8: the formula divides every parameter by t, but the 65 RMSNorm
  // weights (2 per layer + final, 4096 each) stay whole on every TP rank, as
  // in Megatron's code: the shard holds 7/8 of them more.
  const DryRun tp8 = dry_run(parse(base + " --tensor_model_parallel_size 8", 8));
  const ClassMemory& t = tp8.classes.at(0);
  const int64_t norms = 65 * 4096;
  EXPECT_EQ(t.parameters, megatron_llama2_7b_shard(8) + norms - norms / 8);
  EXPECT_NEAR(state_bytes(t) / (18 * static_cast<double>(t.parameters)), 1.0, 1e-6);
}

// The same model at TP 8 on the node: one class for all eight ranks, and it fits.
TEST_F(DryRunTest, SevenBillionAtTensorParallelEightFits) {
  const DryRun r =
      dry_run(parse("pt --model_preset llama2-7b --bf16 --seq_length 4096 --micro_batch_size 1 --global_batch_size 64 "
                    "--train_iters 1 --lr_warmup_iters 0 --vocab_size 32000 --tensor_model_parallel_size 8 "
                    "--sequence_parallel --output_dir " +
                        out_.string(),
                    8));
  ASSERT_EQ(r.classes.size(), 1u);
  EXPECT_EQ(ranks_text(r.classes[0].rank_class.ranks), "0-7");
  EXPECT_NEAR(static_cast<double>(r.classes[0].parameters), 6.74e9 / 8, 0.01e9);
  EXPECT_TRUE(plan_fits(r)) << memory_report(r);
}

// Long context: Llama-2-7B at 32K tokens on 8 NPUs with the distributed
// optimizer and full recompute. As 8 data-parallel replicas each rank holds
// whole 32K-token sequences (logits alone s V 4 B = 4.2 GB, the layer inputs
// 32 s h 2 B = 8.6 GB) and does not fit in 64 GiB; with CP = 8 every rank
// holds 1/8 of each sequence and the optimizer is still sharded 8 ways
// (over DP x CP), and it fits.
TEST_F(DryRunTest, SevenBillionAtThirtyTwoKFitsWithContextParallelism) {
  const std::string base =
      "pt --model_preset llama2-7b --bf16 --seq_length 32768 --max_position_embeddings 32768 --micro_batch_size 1 "
      "--global_batch_size 8 --train_iters 1 --lr_warmup_iters 0 --vocab_size 32000 --use_distributed_optimizer "
      "--recompute_granularity full --recompute_method uniform --recompute_num_layers 1 --output_dir " +
      out_.string();
  const DryRun dp8 = dry_run(parse(base, 8));
  EXPECT_FALSE(plan_fits(dp8)) << memory_report(dp8);
  const DryRun cp8 = dry_run(parse(base + " --context_parallel_size 8", 8));
  ASSERT_EQ(cp8.classes.size(), 8u) << "one class per optimizer shard (DP x CP = 8)";
  EXPECT_TRUE(plan_fits(cp8)) << memory_report(cp8);
  const ClassMemory& a = dp8.classes[0];
  const ClassMemory& b = cp8.classes[0];
  // The same optimizer shard size; an eighth of the activations plus the
  // ring's buffer of one block's output and lse, s/8 a (d 2 B + 4 B) = 34 MB
  // (the bound allows 2% of the eighth, 60 MB).
  EXPECT_EQ(category_bytes(a, MemCategory::kOptimizer), category_bytes(b, MemCategory::kOptimizer));
  const double eighth = category_bytes(a, MemCategory::kActivations) / 8;
  EXPECT_GT(category_bytes(b, MemCategory::kActivations), eighth + 34e6);
  EXPECT_LT(category_bytes(b, MemCategory::kActivations), eighth * 1.02);
  EXPECT_GT(category_bytes(b, MemCategory::kCommBuffers), 0) << "the ring's K/V blocks in flight";
}

}  // namespace
}  // namespace mtrain::plan
