// Checkpoints through the real binary: resume is exact (20 iterations straight
// equal 10 + resume + 10, bit for bit: losses, learning rates, consumed
// samples and the final weights and optimizer states), for fp32, bf16 and
// fp16 on one device and for (TP, PP, DP) = (2, 2, 2) with the distributed
// optimizer; a checkpoint saved at (2, 2, 2) resumes under other layouts
// within fp32 rounding; and the refusals a user meets (another model, state
// that was not saved, no checkpoint at all) are clear errors with exit 5.
//
// The (2, 2, 2) runs use 4 query groups (the demo has 2) so that TP = 4 is a
// valid target layout; the padded vocabulary (1024 rows) is the same under
// every TP here (another padding is tested on its own), so resharding changes
// nothing but the rounding of split reductions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/sharded_checkpoint.h"
#include "common/file_system.h"
#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

// A directory holding only iteration 10 of `from`, as if the run had stopped there.
void seed_with_iteration_10(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  fs::copy(from / "iter_0000010", to / "iter_0000010", fs::copy_options::recursive);
  write_text(to / "latest_checkpointed_iteration.txt", "10");
}

double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(a), 1e-30); }

// Iterations 11..20 of `resumed` against the same iterations of `straight`.
void expect_continues(const fs::path& straight, const fs::path& resumed, double tolerance) {
  const auto a = train_rows(straight), b = train_rows(resumed);
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 10u) << "the resumed run logs iterations 11..20 only";
  for (size_t i = 0; i < b.size(); ++i) {
    const nlohmann::json &x = a[i + 10], &y = b[i];
    ASSERT_EQ(y.at("iteration").get<std::string>(), x.at("iteration").get<std::string>());
    EXPECT_EQ(y.at("consumed_samples"), x.at("consumed_samples")) << "iteration " << i + 11;
    EXPECT_EQ(y.at("learning_rate"), x.at("learning_rate")) << "iteration " << i + 11;
    if (tolerance == 0) {  // fp16 overflow steps log a null grad norm
      EXPECT_EQ(x.at("loss"), y.at("loss")) << "iteration " << i + 11;
      EXPECT_EQ(x.at("grad_norm"), y.at("grad_norm")) << "iteration " << i + 11;
      EXPECT_EQ(x.at("loss_scale"), y.at("loss_scale")) << "iteration " << i + 11;
    } else {
      const double la = x.at("loss").get<double>(), lb = y.at("loss").get<double>();
      const double ga = x.at("grad_norm").get<double>(), gb = y.at("grad_norm").get<double>();
      EXPECT_LE(rel(la, lb), tolerance) << "iteration " << i + 11 << ": loss " << la << " vs " << lb;
      EXPECT_LE(rel(ga, gb), tolerance) << "iteration " << i + 11 << ": grad norm " << ga << " vs " << gb;
    }
  }
}

// Every tensor of the two checkpoints' latest iteration (weights and
// optimizer states), element for element, whatever layout saved them.
void expect_same_tensors(const fs::path& a, const fs::path& b) {
  PosixFileSystem pfs;
  const auto ra = checkpoint::CheckpointReader::open(pfs, a.string());
  const auto rb = checkpoint::CheckpointReader::open(pfs, b.string());
  ASSERT_EQ(ra.names(), rb.names());
  for (const std::string& name : ra.names()) {
    const Shape shape = ra.global_shape(name);
    ASSERT_EQ(shape, rb.global_shape(name)) << name;
    std::vector<float> x(static_cast<size_t>(shape_numel(shape))), y(x.size());
    const std::vector<int64_t> zero(shape.size(), 0);
    ra.read_block(name, zero, shape, x.data());
    rb.read_block(name, zero, shape, y.data());
    ASSERT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << name << " differs";
  }
}

class Checkpoint : public MtrainTest {};

// --- exact resume on one device, in each precision ---------------------------

class ExactResume : public MtrainTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(ExactResume, TenPlusTenEqualsTwentyBitForBit) {
  const std::string precision = GetParam() == "fp32" ? "" : "--" + GetParam();
  const RunResult straight = run(checkpoint_job(tmp_ / "straight", precision), "straight");
  ASSERT_EQ(straight.exit_code, 0) << straight.describe();
  EXPECT_TRUE(contains(straight.out, "saving checkpoint at iteration      10 to " + (tmp_ / "straight").string()));
  EXPECT_TRUE(contains(straight.out, "successfully saved checkpoint from iteration      20 to " +
                                         (tmp_ / "straight").string() + " [ t 1/1, p 1/1 ]"))
      << straight.out;

  seed_with_iteration_10(tmp_ / "straight", tmp_ / "resumed");
  const RunResult resumed =
      run(concat(checkpoint_job(tmp_ / "resumed", precision), {"--load", (tmp_ / "resumed").string()}), "resumed");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.describe();
  EXPECT_TRUE(contains(resumed.out, "successfully loaded checkpoint from " + (tmp_ / "resumed").string() +
                                        " [ t 1/1, p 1/1 ] at iteration 10"))
      << resumed.out;
  expect_continues(tmp_ / "straight", tmp_ / "resumed", 0);
  expect_same_tensors(tmp_ / "straight", tmp_ / "resumed");
}

INSTANTIATE_TEST_SUITE_P(Precisions, ExactResume, ::testing::Values("fp32", "bf16", "fp16"));

// --- refusals and options ------------------------------------------------------

TEST_F(Checkpoint, AnotherModelShapeIsRefusedNamingBothValues) {
  ASSERT_EQ(run(checkpoint_job(tmp_ / "a", "--train_iters 10"), "a").exit_code, 0);
  const RunResult r = run(concat(checkpoint_job(tmp_ / "b", "--num_layers 2 --hidden_size 128 --ffn_hidden_size 344"),
                                 {"--load", (tmp_ / "a").string()}),
                          "b");
  EXPECT_EQ(r.exit_code, 5) << r.describe();
  EXPECT_TRUE(contains(r.err, "num_layers value from checkpoint (4) is not equal to the input argument value (2)"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "hidden_size value from checkpoint (256) is not equal to the input argument value (128)"))
      << r.err;
  EXPECT_FALSE(fs::exists(tmp_ / "b" / "logging.jsonl") && !train_rows(tmp_ / "b").empty()) << "nothing trained";
  const RunResult heads = run(concat(checkpoint_job(tmp_ / "c",
                                                    "--num_attention_heads 8 --num_query_groups 4 "
                                                    "--vocab_size 2048"),
                                     {"--load", (tmp_ / "a").string()}),
                              "c");
  EXPECT_EQ(heads.exit_code, 5) << heads.describe();
  EXPECT_TRUE(contains(heads.err,
                       "num_attention_heads value from checkpoint (4) is not equal to the input argument "
                       "value (8)"))
      << heads.err;
  EXPECT_TRUE(contains(heads.err,
                       "vocab_size value from checkpoint (1024) is not equal to the input argument value "
                       "(2048)"))
      << heads.err;
}

TEST_F(Checkpoint, StateSavedWithoutOptimizerOrRngIsRefusedUnlessTheLoadSkipsIt) {
  ASSERT_EQ(run(checkpoint_job(tmp_ / "a", "--train_iters 10 --no_save_optim --no_save_rng"), "a").exit_code, 0);
  const std::vector<std::string> load = {"--load", (tmp_ / "a").string()};
  const RunResult optim = run(concat(checkpoint_job(tmp_ / "b"), load), "b");
  EXPECT_EQ(optim.exit_code, 5) << optim.describe();
  EXPECT_TRUE(contains(optim.err, "Unable to load the optimizer state from checkpoint")) << optim.err;
  EXPECT_TRUE(contains(optim.err, "--no_load_optim")) << optim.err;
  const RunResult rng = run(concat(checkpoint_job(tmp_ / "c", "--no_load_optim"), load), "c");
  EXPECT_EQ(rng.exit_code, 5) << rng.describe();
  EXPECT_TRUE(contains(rng.err, "Unable to load the rng state from checkpoint")) << rng.err;
  const RunResult ok = run(concat(checkpoint_job(tmp_ / "d", "--no_load_optim --no_load_rng"), load), "d");
  ASSERT_EQ(ok.exit_code, 0) << ok.describe();
  const auto rows = train_rows(tmp_ / "d");
  ASSERT_EQ(rows.size(), 10u);
  EXPECT_EQ(rows.front().at("iteration").get<std::string>(), "11/20") << "the iteration and data position resume";
  EXPECT_EQ(rows.front().at("learning_rate"), train_rows(tmp_ / "a").front().at("learning_rate"))
      << "--no_load_optim restarts the LR schedule (warmup), as in Megatron";
}

TEST_F(Checkpoint, FinetuneLoadsOnlyTheWeights) {
  ASSERT_EQ(run(checkpoint_job(tmp_ / "a"), "a").exit_code, 0);
  const RunResult r =
      run(concat(checkpoint_job(tmp_ / "b", "--train_iters 3 --finetune"), {"--load", (tmp_ / "a").string()}), "b");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "--finetune: weights only, starting at iteration 0")) << r.out;
  const auto trained = train_rows(tmp_ / "a"), tuned = train_rows(tmp_ / "b");
  ASSERT_EQ(tuned.size(), 3u);
  EXPECT_EQ(tuned[0].at("iteration").get<std::string>(), "1/3");
  EXPECT_EQ(tuned[0].at("consumed_samples").get<int>(), 8) << "the data starts from the beginning";
  // The first batch of the data, seen by the trained weights: far below the
  // fresh model's loss on it (ln 1024 = 6.9), near the end of the first run.
  EXPECT_LT(tuned[0].at("loss").get<double>(), trained[0].at("loss").get<double>() - 1.0);
}

TEST_F(Checkpoint, MissingCheckpointStartsFreshOrStopsOnRequest) {
  fs::create_directories(tmp_ / "empty");
  const std::vector<std::string> load = {"--load", (tmp_ / "empty").string()};
  const RunResult fresh = run(concat(checkpoint_job(tmp_ / "a", "--train_iters 2"), load), "a");
  ASSERT_EQ(fresh.exit_code, 0) << fresh.describe();
  EXPECT_TRUE(contains(fresh.out, "WARNING: could not find the metadata file " + (tmp_ / "empty").string() +
                                      "/latest_checkpointed_iteration.txt"))
      << fresh.out;
  EXPECT_TRUE(contains(fresh.out, "will not load any checkpoints and will start from random"));
  const RunResult stop = run(concat(checkpoint_job(tmp_ / "b", "--exit_on_missing_checkpoint"), load), "b");
  EXPECT_EQ(stop.exit_code, 5) << stop.describe();
  EXPECT_TRUE(contains(stop.err, "latest_checkpointed_iteration.txt is missing")) << stop.err;
}

TEST_F(Checkpoint, SaveTotalLimitKeepsTheNewestAfterEachCommit) {
  const RunResult r = run(checkpoint_job(tmp_ / "a", "--save_interval 5 --save_total_limit 2"), "a");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  std::vector<std::string> dirs;
  for (const auto& e : fs::directory_iterator(tmp_ / "a"))
    if (e.is_directory() && e.path().filename().string().starts_with("iter_"))  // not report/
      dirs.push_back(e.path().filename().string());
  std::sort(dirs.begin(), dirs.end());
  EXPECT_EQ(dirs, (std::vector<std::string>{"iter_0000015", "iter_0000020"}));
  EXPECT_EQ(read_text(tmp_ / "a" / "latest_checkpointed_iteration.txt"), "20");
  EXPECT_TRUE(contains(r.out, "removed old checkpoint")) << r.out;
}

// Megatron's rewind after a loss spike: resume an older iteration into the
// same directory; its saves replace the newer ones once they are complete.
TEST_F(Checkpoint, RewindIntoTheSameDirectoryReplacesTheNewerCheckpoints) {
  ASSERT_EQ(run(checkpoint_job(tmp_ / "a"), "a").exit_code, 0);
  fs::copy(tmp_ / "a" / "logging.jsonl", tmp_ / "straight.jsonl");
  const RunResult r =
      run(concat(checkpoint_job(tmp_ / "a"), {"--load", (tmp_ / "a").string(), "--ckpt_step", "10"}), "b");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "replaced the checkpoint " + (tmp_ / "a" / "iter_0000020").string())) << r.out;
  EXPECT_EQ(read_text(tmp_ / "a" / "latest_checkpointed_iteration.txt"), "20");
  std::vector<nlohmann::json> before;
  for (const auto& j : read_jsonl(tmp_ / "straight.jsonl"))
    if (j.contains("loss")) before.push_back(j);
  const auto after = train_rows(tmp_ / "a");
  ASSERT_EQ(before.size(), 20u);
  ASSERT_GE(after.size(), 10u);
  EXPECT_EQ(after.back().at("iteration"), "20/20");
  EXPECT_EQ(after.back().at("loss"), before.back().at("loss")) << "iteration 20 again, bit for bit";
}

// TP changes the vocabulary padding: saved with 1100 rows at TP=1, resumed
// with 2200 at TP=2 (rank 1's rows are all padding the checkpoint lacks) and
// with 1024 at TP=1 (no padding). The padded ids are masked, so padding rows
// are not part of the model and the resumed runs continue the straight one
// to fp32 rounding, the bound of every other reshard here. (With Megatron's
// --mask_padded_vocab false the 1100 fresh rows join the softmax and add
// ~0.7 to the loss.)
TEST_F(Checkpoint, ResumeUnderAnotherVocabularyPaddingIsExact) {
  ASSERT_EQ(run(checkpoint_job(tmp_ / "a", "--make_vocab_size_divisible_by 1100"), "a").exit_code, 0);
  seed_with_iteration_10(tmp_ / "a", tmp_ / "b");
  const RunResult r = run(concat(checkpoint_job(tmp_ / "b",
                                                "--make_vocab_size_divisible_by 1100 "
                                                "--tensor_model_parallel_size 2"),
                                 {"--load", (tmp_ / "b").string()}),
                          "b", launch_ranks(2));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "pads the vocabulary (1024 tokens) to 1100 rows, this run to 2200")) << r.out;
  expect_continues(tmp_ / "a", tmp_ / "b", 1e-5);

  seed_with_iteration_10(tmp_ / "a", tmp_ / "c");
  const RunResult s = run(concat(checkpoint_job(tmp_ / "c"), {"--load", (tmp_ / "c").string()}), "c");
  ASSERT_EQ(s.exit_code, 0) << s.describe();
  EXPECT_TRUE(contains(s.out, "pads the vocabulary (1024 tokens) to 1100 rows, this run to 1024")) << s.out;
  expect_continues(tmp_ / "a", tmp_ / "c", 1e-5);
}

// --- MoE: experts are named sharded tensors -------------------------------------

// Saved at TP 2 + SP with the experts split over TP (ETP 2), resumed on one
// device (whole experts): the run continues as the uninterrupted one. pt rows
// are full length, so SP adds no padding tokens for the router to count
// (test_mtrain_moe.cc).
TEST_F(Checkpoint, MoeCheckpointSavedWithExpertTpResumesOnOneDevice) {
  const std::string moe =
      "--lr 3e-4 --save_interval 10 --num_experts 4 --moe_ffn_hidden_size 128 --moe_layer_freq 2 "
      "--moe_aux_loss_coeff 1e-2";
  const RunResult straight =
      run(concat(demo_pt_args(20, tmp_ / "straight"), words(moe + " --tensor_model_parallel_size 2 --sequence_parallel "
                                                                  "--expert_tensor_parallel_size 2")),
          "straight", launch_ranks(2));
  ASSERT_EQ(straight.exit_code, 0) << straight.describe();
  seed_with_iteration_10(tmp_ / "straight", tmp_ / "resumed");
  const RunResult resumed =
      run(concat(concat(demo_pt_args(20, tmp_ / "resumed"), words(moe)), {"--load", (tmp_ / "resumed").string()}),
          "resumed");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.describe();
  expect_continues(tmp_ / "straight", tmp_ / "resumed", 1e-5);
}

// Saved on one device with a gated shared expert, resumed under PP 2 (one
// MoE layer per stage): the router, the experts and the shared expert with
// its gate are named tensors any layout reads, and the run continues as the
// uninterrupted one. The checkpoint records the MoE shape, so a resume with
// another expert count is refused naming both values (Megatron's
// check_checkpoint_args wording), and HF export writes it as Qwen2-MoE.
TEST_F(Checkpoint, MoeCheckpointReshardsOverPipelineAndRecordsTheMoeShape) {
  const std::string moe =
      "--lr 3e-4 --save_interval 10 --num_experts 4 --moe_ffn_hidden_size 128 --moe_layer_freq 2 "
      "--moe_aux_loss_coeff 1e-2 --moe_shared_expert_intermediate_size 64 --moe_shared_expert_gate";
  const RunResult straight = run(concat(demo_pt_args(20, tmp_ / "straight"), words(moe)), "straight");
  ASSERT_EQ(straight.exit_code, 0) << straight.describe();
  PosixFileSystem pfs;
  const auto names = checkpoint::CheckpointReader::open(pfs, (tmp_ / "straight").string()).names();
  for (const char* n :
       {"decoder.layers.2.mlp.router.weight", "decoder.layers.2.mlp.experts.local_experts.3.linear_fc1.weight",
        "decoder.layers.0.mlp.shared_experts.gate_weight"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  seed_with_iteration_10(tmp_ / "straight", tmp_ / "resumed");
  const std::vector<std::string> load = {"--load", (tmp_ / "resumed").string()};
  const RunResult resumed =
      run(concat(concat(demo_pt_args(20, tmp_ / "resumed"), words(moe + " --pipeline_model_parallel_size 2")), load),
          "resumed", launch_ranks(2));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.describe();
  expect_continues(tmp_ / "straight", tmp_ / "resumed", 1e-5);

  const RunResult other =
      run(concat(concat(demo_pt_args(20, tmp_ / "other"), words(moe + " --num_experts 8")), load), "other");
  EXPECT_EQ(other.exit_code, 5) << other.describe();
  EXPECT_TRUE(contains(other.err, "num_experts value from checkpoint (4) is not equal to the input argument value (8)"))
      << other.err;
  const RunResult hf =
      run({"export", "--to_hf", "true", "--load", (tmp_ / "straight").string(), "--output_dir", (tmp_ / "hf").string()},
          "hf");
  // The demo's q/k/v biases with a gated shared expert are Qwen2-MoE's; Megatron's --moe_layer_freq 2
  // (layers 0 and 2) is decoder_sparse_step 1 with mlp_only_layers [1, 3].
  ASSERT_EQ(hf.exit_code, 0) << hf.describe();
  const nlohmann::json config = nlohmann::json::parse(read_text(tmp_ / "hf/config.json"));
  EXPECT_EQ(config["architectures"][0], "Qwen2MoeForCausalLM");
  EXPECT_EQ(config["decoder_sparse_step"], 1);
  EXPECT_EQ(config["mlp_only_layers"], nlohmann::json::array({1, 3}));
  EXPECT_EQ(config["router_aux_loss_coef"], 1e-2);
}

// --- (2, 2, 2): exact resume and resharding --------------------------------------

class ParallelCheckpoint : public MtrainTest {
 protected:
  // The straight 20-iteration run at (2, 2, 2) with the distributed optimizer,
  // saved at 10 and 20; made once for the suite.
  static void SetUpTestSuite() {
    dir_ = new fs::path(make_temp_dir("ckpt222"));
    straight_ok_ = run_mtrain(concat(checkpoint_job(*dir_ / "straight", kModel), words(kLayout)), *dir_, "straight",
                              launch_ranks(8))
                       .exit_code == 0;
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }
  // Resumes iteration 10 of the straight run under `layout` on `n` ranks.
  void resume(const std::string& layout, int n) {
    ASSERT_TRUE(straight_ok_) << "the straight (2,2,2) run failed; see " << *dir_ / "straight.err";
    seed_with_iteration_10(*dir_ / "straight", tmp_ / "resumed");
    const RunResult r = run(concat(checkpoint_job(tmp_ / "resumed", std::string(kModel) + " " + layout),
                                   {"--load", (tmp_ / "resumed").string()}),
                            "resumed", launch_ranks(n));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_TRUE(contains(r.out, "at iteration 10")) << r.out;
  }
  static constexpr const char* kModel = "--num_query_groups 4";
  static constexpr const char* kLayout = "--tensor_model_parallel_size 2 --pipeline_model_parallel_size 2";
  static fs::path* dir_;
  static bool straight_ok_;
};
fs::path* ParallelCheckpoint::dir_ = nullptr;
bool ParallelCheckpoint::straight_ok_ = false;

TEST_F(ParallelCheckpoint, ResumeUnderTheSameLayoutIsExact) {
  resume(kLayout, 8);
  expect_continues(*dir_ / "straight", tmp_ / "resumed", 0);
  expect_same_tensors(*dir_ / "straight", tmp_ / "resumed");
}

TEST_F(ParallelCheckpoint, ResumesOnOneDevice) {
  resume("", 1);
  expect_continues(*dir_ / "straight", tmp_ / "resumed", 1e-5);
}

TEST_F(ParallelCheckpoint, ResumesAtTp4Dp2) {
  resume("--tensor_model_parallel_size 4", 8);
  expect_continues(*dir_ / "straight", tmp_ / "resumed", 1e-5);
}

TEST_F(ParallelCheckpoint, ResumesAtPp2Dp4) {
  resume("--pipeline_model_parallel_size 2", 8);
  expect_continues(*dir_ / "straight", tmp_ / "resumed", 1e-5);
}

// Context parallelism holds whole weights on every CP rank and shards the
// optimizer over DP x CP: the (2, 2, 2) checkpoint resumes at CP 2 x TP 2 x DP 2.
TEST_F(ParallelCheckpoint, ResumesAtCp2Tp2Dp2) {
  resume("--context_parallel_size 2 --tensor_model_parallel_size 2", 8);
  expect_continues(*dir_ / "straight", tmp_ / "resumed", 1e-5);
}

TEST_F(ParallelCheckpoint, ResumesWithoutTheDistributedOptimizer) {
  resume(std::string(kLayout) + " --use_distributed_optimizer false", 8);
  expect_continues(*dir_ / "straight", tmp_ / "resumed", 1e-5);
}

}  // namespace
}  // namespace mtrain::functional
