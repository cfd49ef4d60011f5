// LoRA training is real under every parallel layout: with the same seed and
// global batch, 20 iterations of `mtrain sft --train_type lora` (adapters on
// every linear, adapter dropout on) at (TP, PP, DP) = (2,1,1), (1,2,1),
// (1,1,2) and (2,2,2) with sequence parallelism give the per-iteration loss
// and grad norm of the single-device run; the checkpoints hold adapters
// only, on every layout, and the adapters moved.
//
// Bound: relative difference <= 1e-5, the bound and argument of
// test_mtrain_parallel.cc (lr 3e-4 keeps the fp32 reordering of TP/DP sums,
// ~1e-8 per step, below 1e-6 over 20 iterations; 1e-5 leaves a 10x margin).
// A wrong adapter split or a missing collective moves the loss by far more
// (dropping the TP all-reduce of the row-parallel adapter changes iteration 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "checkpoint/sharded_checkpoint.h"
#include "common/file_system.h"
#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

struct Layout {
  std::string name;
  int ranks;
  std::string flags;
};
std::ostream& operator<<(std::ostream& os, const Layout& l) { return os << l.name; }

std::vector<std::string> lora_args(const fs::path& out) {
  return concat(words("sft configs/sft_demo.yaml --train_type lora --lora_rank 8 --lora_alpha 16 --train_iters 20 "
                      "--lr 3e-4 --min_lr 3e-5 --lr_decay_iters 2400 --micro_batch_size 2 --global_batch_size 8 "
                      "--eval_interval 20 --eval_iters 1 --log_interval 1 --num_threads 1 --num_generate_samples 0 "
                      "--save_interval 10"),
                {"--output_dir", out.string()});
}

double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(a), 1e-30); }

std::vector<float> tensor(const checkpoint::CheckpointReader& r, const std::string& name) {
  const Shape shape = r.global_shape(name);
  std::vector<float> x(static_cast<size_t>(shape_numel(shape)));
  r.read_block(name, std::vector<int64_t>(shape.size(), 0), shape, x.data());
  return x;
}

bool adapter(const std::string& name) { return name.find(".lora_") != std::string::npos; }
bool weight(const std::string& name) { return name.rfind("optimizer.", 0) != 0; }

// A LoRA checkpoint names its frozen base instead of holding it
// (test_mtrain_lora_checkpoint.cc): every tensor in it is an adapter's.
void expect_adapters_only(const fs::path& dir, int64_t iteration) {
  PosixFileSystem pfs;
  const auto r = checkpoint::CheckpointReader::open(pfs, dir.string(), iteration);
  int adapters = 0;
  for (const std::string& name : r.names()) {
    EXPECT_TRUE(adapter(name)) << name << ": the frozen base is not saved";
    adapters += weight(name);
  }
  EXPECT_GT(adapters, 10);
}

class LoraTraining : public MtrainTest, public ::testing::WithParamInterface<Layout> {};

TEST_P(LoraTraining, MatchesSingleDeviceAndLeavesTheBaseFrozen) {
  const Layout& l = GetParam();
  const RunResult ref = run(lora_args(tmp_ / "ref"), "ref");
  ASSERT_EQ(ref.exit_code, 0) << ref.describe();
  const RunResult par = run(concat(lora_args(tmp_ / "par"), words(l.flags)), "par", launch_ranks(l.ranks));
  ASSERT_EQ(par.exit_code, 0) << par.describe();

  const auto a = train_rows(tmp_ / "ref"), b = train_rows(tmp_ / "par");
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 20u);
  for (size_t i = 0; i < a.size(); ++i) {
    const double la = a[i].at("loss").get<double>(), lb = b[i].at("loss").get<double>();
    const double ga = a[i].at("grad_norm").get<double>(), gb = b[i].at("grad_norm").get<double>();
    EXPECT_LE(rel(la, lb), 1e-5) << "iteration " << i + 1 << ": loss " << la << " vs " << lb;
    EXPECT_LE(rel(ga, gb), 1e-5) << "iteration " << i + 1 << ": grad norm " << ga << " vs " << gb;
  }
  // The adapters learn: the loss falls over the 20 iterations.
  EXPECT_LT(a.back().at("loss").get<double>(), a.front().at("loss").get<double>());
  expect_adapters_only(tmp_ / "ref", 10);
  expect_adapters_only(tmp_ / "par", 20);
  PosixFileSystem pfs;
  const auto r10 = checkpoint::CheckpointReader::open(pfs, (tmp_ / "ref").string(), 10);
  const auto r20 = checkpoint::CheckpointReader::open(pfs, (tmp_ / "ref").string(), 20);
  const std::string b0 = "decoder.layers.0.self_attention.linear_qkv.lora_B.weight";
  ASSERT_TRUE(r20.has(b0));
  EXPECT_NE(tensor(r10, b0), tensor(r20, b0)) << "the adapters train";
}

// A LoRA run resumes from its adapter-only checkpoint: 2 + resume 2 == 4,
// bit for bit (10 + 10 and other layouts: test_mtrain_lora_checkpoint.cc).
class LoraCheckpoint : public MtrainTest {};

TEST_F(LoraCheckpoint, ResumeContinuesExactly) {
  auto args = [&](const std::string& out) {
    return concat(words("sft configs/sft_demo.yaml --train_type lora --train_iters 4 --lr_warmup_iters 1 "
                        "--micro_batch_size 2 --global_batch_size 8 --eval_interval 20 --eval_iters 1 --log_interval 1 "
                        "--num_threads 1 --num_generate_samples 0 --save_interval 2"),
                  {"--output_dir", (tmp_ / out).string()});
  };
  const RunResult a = run(args("a"), "a");
  ASSERT_EQ(a.exit_code, 0) << a.describe();
  const RunResult b = run(concat(args("b"), {"--load", (tmp_ / "a").string(), "--ckpt_step", "2"}), "b");
  ASSERT_EQ(b.exit_code, 0) << b.describe();
  const auto ra = train_rows(tmp_ / "a"), rb = train_rows(tmp_ / "b");
  ASSERT_EQ(ra.size(), 4u);
  ASSERT_EQ(rb.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(ra[i + 2].at("loss").get<double>(), rb[i].at("loss").get<double>()) << "iteration " << i + 3;
    EXPECT_EQ(ra[i + 2].at("grad_norm").get<double>(), rb[i].at("grad_norm").get<double>()) << "iteration " << i + 3;
  }
}

// A Hugging Face directory is the frozen base (`--model`): the adapters are
// not in it and start as PEFT does, so iteration 1's loss is the full
// fine-tune's from the same directory, bit for bit.
TEST_F(LoraCheckpoint, HuggingFaceModelIsTheFrozenBase) {
  auto sft = [&](const std::string& out, const std::string& extra) {
    return concat(words("sft configs/sft_demo.yaml --train_iters 1 --lr_warmup_iters 0 --micro_batch_size 2 "
                        "--global_batch_size 8 --eval_interval 20 --eval_iters 1 --log_interval 1 --num_threads 1 "
                        "--num_generate_samples 0 " +
                        extra),
                  {"--output_dir", (tmp_ / out).string()});
  };
  ASSERT_EQ(run(sft("trained", ""), "trained").exit_code, 0);
  const RunResult e =
      run({"export", "--to_hf", "--load", (tmp_ / "trained").string(), "--output_dir", (tmp_ / "hf").string()}, "hf");
  ASSERT_EQ(e.exit_code, 0) << e.describe();
  const std::string model = "--model " + (tmp_ / "hf").string();
  const RunResult full = run(sft("full", model), "full");
  ASSERT_EQ(full.exit_code, 0) << full.describe();
  const RunResult lora = run(sft("lora", model + " --train_type lora"), "lora");
  ASSERT_EQ(lora.exit_code, 0) << lora.describe();
  const auto a = train_rows(tmp_ / "full"), b = train_rows(tmp_ / "lora");
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(a[0].at("loss").get<double>(), b[0].at("loss").get<double>());
}

// issue 14's planning case: a 7B LoRA job fits one 910B3 (64 GiB) where full
// fine-tuning does not. Llama-2-7B in bf16: the frozen base is 2 bytes per
// parameter (12.6 GiB); full training adds fp32 grads and Adam m, v and
// master (16 bytes per parameter, 100 GiB more), LoRA adds them for the
// adapters only (r 8 on every linear: 20 M parameters, 0.3 GiB).
// The dry run's "gradients" and "optimizer states" rows, in GiB (rounded to 0.01).
std::map<std::string, double> state_gib(const std::string& out) {
  const std::regex row(R"(  (gradients|optimizer states) +([0-9.]+) GiB)");
  std::map<std::string, double> gib;
  for (std::sregex_iterator it(out.begin(), out.end(), row), end; it != end; ++it) gib[(*it)[1]] = std::stod((*it)[2]);
  return gib;
}

class LoraPlan : public MtrainTest {
 protected:
  RunResult plan(const std::string& train_type) {
    return run(words("sft --model_preset llama2-7b --bf16 --seq_length 2048 --micro_batch_size 1 "
                     "--global_batch_size 16 --train_iters 1 --lr_warmup_iters 0 --recompute_granularity full "
                     "--recompute_method uniform --recompute_num_layers 1 --dry_run --train_type " +
                     train_type + " --output_dir " + (tmp_ / train_type).string()),
               train_type);
  }
};

TEST_F(LoraPlan, SevenBillionLoraFitsOneDeviceWhereFullFineTuningDoesNot) {
  const RunResult full = plan("full");
  EXPECT_EQ(full.exit_code, 6) << full.describe();
  EXPECT_NE(full.out.find("DOES NOT FIT"), std::string::npos) << full.out;
  const RunResult lora = plan("lora");
  ASSERT_EQ(lora.exit_code, 0) << lora.describe();
  EXPECT_NE(lora.out.find("The plan FITS on every device."), std::string::npos) << lora.out;
  // The device's accounting: bf16 base weights; adapter grads (fp32) and
  // Adam m, v and master (3 x fp32) for r (in + out) per linear and layer.
  const double h = 4096, ffn = 11008, L = 32, r = 8;
  const double adapters = L * r * ((h + 3 * h) + (h + h) + (h + 2 * ffn) + (ffn + h));
  const std::map<std::string, double> gib = state_gib(lora.out);
  // The report rounds to 0.01 GiB.
  EXPECT_NEAR(gib.at("gradients"), 4 * adapters / (1 << 30), 0.006) << lora.out;
  EXPECT_NEAR(gib.at("optimizer states"), 12 * adapters / (1 << 30), 0.006) << lora.out;
}

// On an MoE model every routed expert's adapters are accounted: Qwen3-30B-A3B's
// shapes (4 of its 48 layers, bf16, one device): per layer qkv (2048 -> 5120),
// proj (4096 -> 2048) and 128 experts' fc1 (2048 -> 2 x 768) and fc2 (768 -> 2048).
TEST_F(LoraPlan, MoeExpertAdaptersAreAccounted) {
  const RunResult r = run(words("sft --model_preset qwen3-30b-a3b --num_layers 4 --bf16 --seq_length 2048 "
                                "--micro_batch_size 1 --global_batch_size 16 --train_iters 1 --lr_warmup_iters 0 "
                                "--dry_run --train_type lora --lora_dropout 0 --output_dir " +
                                (tmp_ / "moe").string()),
                          "moe");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const double h = 2048, L = 4, E = 128, rank = 8;
  const double adapters = L * rank * ((h + 5120) + (4096 + h) + E * ((h + 2 * 768) + (768 + h)));
  const std::map<std::string, double> gib = state_gib(r.out);
  EXPECT_NEAR(gib.at("gradients"), 4 * adapters / (1 << 30), 0.006) << r.out;
  EXPECT_NEAR(gib.at("optimizer states"), 12 * adapters / (1 << 30), 0.006) << r.out;
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, LoraTraining,
    ::testing::Values(Layout{"tp2", 2, "--tensor_model_parallel_size 2"},
                      Layout{"pp2", 2, "--pipeline_model_parallel_size 2"},
                      Layout{"dp2", 2, ""},  // distributed optimizer (swift's default) over the adapters
                      Layout{"tp2pp2dp2_sp", 8,
                             "--tensor_model_parallel_size 2 --pipeline_model_parallel_size 2 --sequence_parallel"},
                      Layout{"tp2_sp_recompute", 2,
                             "--tensor_model_parallel_size 2 --sequence_parallel --recompute_granularity full "
                             "--recompute_method uniform --recompute_num_layers 1"}),
    [](const ::testing::TestParamInfo<Layout>& i) { return i.param.name; });

}  // namespace
}  // namespace mtrain::functional
