// `mtrain infer --adapters DIR [--merge_lora true]` (issue 14): a LoRA run on
// an HF base, its PEFT export and its merged export. The adapter as LoRA
// layers, merged at load, merged by `export --to_hf --merge_lora true`, from
// the PEFT directory or from the LoRA checkpoint itself all give the same
// greedy tokens and logits within the fp32 bound of the merge; TP 2 and PP 2
// answer like one device; bad input exits with the README's code (label mpi:
// the TP / PP cases launch 2 ranks through mpirun).
#include <cmath>

#include "greedy_answer.h"
#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

class InferLora : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::current_path(MTRAIN_SOURCE_DIR);  // the runs' args.json name the tokenizer relative to the sources
    dir_ = new fs::path(make_temp_dir("infer_lora"));
    const fs::path d = *dir_;
    const std::string lora =
        "--train_type lora --lora_rank 4 --lora_alpha 8 --lora_dropout 0 --lr 1e-2 --modules_to_save word_embeddings "
        "--lora_bias all";
    const auto ok = [&](const std::vector<std::string>& args, const std::string& tag) {
      const RunResult r = run_mtrain(args, d, tag);
      if (r.exit_code != 0) std::fprintf(stderr, "%s\n", r.describe().c_str());
      return r.exit_code == 0;
    };
    ok_ = ok(checkpoint_job(d / "full", "--train_iters 1 --save_interval 1"), "full") &&
          ok({"export", "--to_hf", "--load", (d / "full").string(), "--output_dir", (d / "base").string()}, "base") &&
          ok(checkpoint_job(d / "lora", lora +
                                            " --train_iters 3 --save_interval 3 --tokenizer "
                                            "configs/demo/tokenizer.json --model " +
                                            (d / "base").string()),
             "lora") &&
          ok({"export", "--to_peft", "--load", (d / "lora").string(), "--output_dir", (d / "peft").string()}, "peft") &&
          ok({"export", "--to_hf", "--merge_lora", "true", "--load", (d / "lora").string(), "--output_dir",
              (d / "merged").string()},
             "merged");
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }
  void SetUp() override { ASSERT_TRUE(ok_) << "a setup run failed (see above)"; }

  // 8 greedy tokens after a fixed prompt, in this process (one device).
  static Answer answer(const std::string& flags) {
    std::vector<std::string> args = words(flags);
    for (std::string& a : args)
      if (a.rfind("@", 0) == 0) a = (*dir_ / a.substr(1)).string();
    // The HF directories mtrain exports hold no tokenizer: the demo's.
    if (flags.find("--model") != std::string::npos) args = concat(args, words(kTokenizer));
    return greedy_answer(args);
  }

  // W·x + s·B·(A·x) against (W + s·B·A)·x: each is a chain of fp32 dot
  // products of at most K = 688 terms (ffn width), within K·eps (eps = 2^-24)
  // of exact relative to the sum of |terms|; 4 linears per layer, 4 layers,
  // well-conditioned norms and softmax between them: 16·688·eps of the
  // largest logit (the bound of the export merge test).
  static constexpr double kBound = 16.0 * 688 / (1 << 24);

  static constexpr const char* kTokenizer = "--tokenizer configs/demo/tokenizer.json";
  static inline fs::path* dir_ = nullptr;
  static inline bool ok_ = false;
};

TEST_F(InferLora, UnmergedEqualsMergedAtLoadAndTheMergedExport) {
  const Answer lora = answer("--model @base --adapters @peft");
  const Answer merged = answer("--model @base --adapters @peft --merge_lora true");
  const Answer exported = answer("--model @merged");
  const Answer base = answer("--model @base");
  ASSERT_EQ(lora.logits.size(), lora.tokens.size());
  EXPECT_EQ(merged.tokens, lora.tokens);
  EXPECT_EQ(exported.tokens, lora.tokens);
  EXPECT_LE(rel_diff(lora, merged), kBound);
  EXPECT_LE(rel_diff(lora, exported), kBound);
  // The adapter changes the logits far more than the bound: the check can fail.
  EXPECT_GT(rel_diff(lora, base), 10 * kBound);
}

TEST_F(InferLora, PeftDirectoryEqualsTheCheckpointItCameFrom) {
  const Answer peft = answer("--model @base --adapters @peft");
  // The LoRA checkpoint as --load runs its own adapters; as --adapters on the full base checkpoint, the same.
  const Answer own = answer("--load @lora");
  const Answer ckpt = answer("--load @full --adapters @lora");
  const Answer own_merged = answer("--load @lora --merge_lora true");
  const Answer alone = answer("--adapters @lora");  // swift infer --adapters CKPT: the base from the checkpoint
  EXPECT_EQ(own.tokens, peft.tokens);
  EXPECT_EQ(ckpt.tokens, peft.tokens);
  EXPECT_EQ(own_merged.tokens, peft.tokens);
  EXPECT_EQ(alone.tokens, peft.tokens);
  EXPECT_LE(rel_diff(peft, own), kBound);
  EXPECT_LE(rel_diff(peft, ckpt), kBound);
  EXPECT_LE(rel_diff(peft, own_merged), kBound);
  EXPECT_LE(rel_diff(peft, alone), kBound);
}

TEST_F(InferLora, Tp2AndPp2AnswerLikeOneDevice) {
  const fs::path d = *dir_;
  std::istringstream all(read_text(fs::path(MTRAIN_SOURCE_DIR) / "configs/demo/sft.jsonl"));
  std::string rows, line;
  for (int i = 0; i < 3 && std::getline(all, line); ++i) rows += line + "\n";
  write_text(d / "val.jsonl", rows);
  const auto infer = [&](const std::string& tag, int ranks, const std::string& extra) {
    const fs::path result = d / (tag + ".jsonl");
    const RunResult r =
        run_mtrain(concat({"infer", "--model", (d / "base").string(), "--adapters", (d / "peft").string(),
                           "--val_dataset", (d / "val.jsonl").string(), "--max_new_tokens", "12", "--result_path",
                           result.string(), "--num_threads", "1"},
                          words(std::string(kTokenizer) + " " + extra)),
                   d, tag, launch_ranks(ranks));
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    std::vector<std::string> out;
    for (const nlohmann::json& row : read_jsonl(result)) out.push_back(row["response"].get<std::string>());
    return out;
  };
  const std::vector<std::string> one = infer("tp1", 1, "");
  ASSERT_EQ(one.size(), 3u);
  EXPECT_EQ(infer("tp2", 2, "--tensor_model_parallel_size 2"), one);
  EXPECT_EQ(infer("tp2_merged", 2, "--tensor_model_parallel_size 2 --merge_lora true"), one);
  EXPECT_EQ(infer("pp2", 2, "--pipeline_model_parallel_size 2"), one);
}

TEST_F(InferLora, BadInputIsRefusedWithTheReadmesExitCode) {
  const fs::path d = *dir_;
  // A base of another FFN width: the adapter's fc1 / fc2 tensors do not fit it.
  ASSERT_EQ(
      run_mtrain(checkpoint_job(d / "other", "--train_iters 1 --save_interval 1 --ffn_hidden_size 512"), d, "other")
          .exit_code,
      0);
  const RunResult shape =
      run_mtrain({"infer", "--load", (d / "other").string(), "--adapters", (d / "peft").string()}, d, "bad_shape");
  EXPECT_EQ(shape.exit_code, 5) << shape.describe();
  EXPECT_TRUE(contains(shape.err, (d / "peft").string())) << shape.err;
  EXPECT_TRUE(contains(shape.err, "mlp.gate_proj.lora_B.weight") || contains(shape.err, "mlp.up_proj.lora_B.weight") ||
              contains(shape.err, "mlp.down_proj.lora_A.weight"))
      << shape.err;

  for (const std::string& base : {"--model " + (d / "base").string(), "--load " + (d / "full").string()}) {
    const RunResult none = run_mtrain(concat(words("infer --merge_lora true " + base), words(kTokenizer)), d, "none");
    EXPECT_EQ(none.exit_code, 2) << none.describe();
    EXPECT_TRUE(contains(none.err, "--merge_lora true merges LoRA adapters, but there are none")) << none.err;
  }

  const RunResult two = run_mtrain(
      {"infer", "--model", (d / "base").string(), "--adapters", (d / "peft").string(), (d / "lora").string()}, d,
      "two");
  EXPECT_EQ(two.exit_code, 2) << two.describe();
  EXPECT_TRUE(contains(two.err, "--adapters takes one adapter directory, got 2")) << two.err;

  for (const char* dir : {"peft", "full"}) {  // alone, only a LoRA checkpoint names its base
    const RunResult alone = run_mtrain({"infer", "--adapters", (d / dir).string()}, d, "alone");
    EXPECT_EQ(alone.exit_code, 2) << alone.describe();
    EXPECT_TRUE(contains(alone.err, "without --model or --load: only an mtrain LoRA training checkpoint")) << alone.err;
  }

  // A fractional lora_alpha: the LoRA layers (an integer --lora_alpha) cannot hold it; merged, it runs.
  fs::copy(d / "peft", d / "peft_frac", fs::copy_options::recursive);
  nlohmann::json cfg = nlohmann::json::parse(read_text(d / "peft_frac/adapter_config.json"));
  cfg["lora_alpha"] = 8.5;
  write_text(d / "peft_frac/adapter_config.json", cfg.dump());
  const std::vector<std::string> frac = concat(
      {"infer", "--model", (d / "base").string(), "--adapters", (d / "peft_frac").string(), "--max_new_tokens", "2"},
      words(kTokenizer));
  const RunResult unmerged = run_mtrain(frac, d, "frac");
  EXPECT_EQ(unmerged.exit_code, 3) << unmerged.describe();
  EXPECT_TRUE(contains(unmerged.err, "lora_alpha 8.5 is not an integer")) << unmerged.err;
  EXPECT_TRUE(contains(unmerged.err, "--merge_lora true")) << unmerged.err;
  EXPECT_EQ(run_mtrain(concat(frac, {"--merge_lora", "true"}), d, "frac_merged").exit_code, 0);

  const RunResult stacked =
      run_mtrain({"infer", "--load", (d / "lora").string(), "--adapters", (d / "peft").string()}, d, "stacked");
  EXPECT_EQ(stacked.exit_code, 2) << stacked.describe();
  EXPECT_TRUE(contains(stacked.err, "is a LoRA checkpoint with its own adapters")) << stacked.err;
}

}  // namespace
}  // namespace mtrain::functional
