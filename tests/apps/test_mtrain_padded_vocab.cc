// The padded vocabulary (make_vocab_size_divisible_by * TP dummy ids) is not
// part of the model: a Hugging Face model started with --model gives the same
// loss at TP = 1, 2 and 4 although each pads differently, and only
// --mask_padded_vocab false (Megatron's softmax over the padded logits)
// makes the loss depend on the padding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

class PaddedVocab : public MtrainTest {
 protected:
  // The first iteration's loss of the demo sft job started from `hf` under `extra` flags on `ranks` ranks; the
  // run must print Megatron's padding line `padded_line`.
  double first_loss(const fs::path& hf, const std::string& tag, const std::string& extra, int ranks,
                    const std::string& padded_line) {
    const RunResult r =
        run(checkpoint_job(tmp_ / tag,
                           "--train_iters 1 --tokenizer configs/demo/tokenizer.json "
                           "--group_query_attention false --num_query_groups 4 --make_vocab_size_divisible_by 120 "
                           "--model " +
                               hf.string() + " " + extra),
            tag, launch_ranks(ranks));
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_TRUE(contains(r.out, padded_line)) << r.out;
    const auto rows = train_rows(tmp_ / tag);
    return rows.empty() ? NAN : rows.front().at("loss").get<double>();
  }
};

// Iteration 1 evaluates the imported weights before any update. 1024 ids pad
// to 1080 at TP=1, 1200 at TP=2 and 1440 at TP=4 (rank 3 then holds padding
// only); HF import fills the padded rows with zeros, so their logits are 0,
// near the real ones, and would add about log(1 + pad * e^{-lse}) per token
// if they joined the softmax.
//
// Bound: TP only regroups fp32 sums (GEMM reductions over the 256-wide hidden
// and the split FFN, the all-reduces of row-parallel outputs, the softmax sums
// over vocabulary slices). Each regrouped sum differs by a few units of
// roundoff (u = 6e-8) relative to its terms, and the loss passes through ~20
// such chained reductions over 4 layers and is a mean of ~10^3 token losses
// of magnitude ~7: a relative difference of order 20 * 8 u ~ 1e-5 at worst
// (measured: ~1e-7).
TEST_F(PaddedVocab, HuggingFaceModelGivesTheSameLossAtTp124) {
  const fs::path run_dir = tmp_ / "run", hf = tmp_ / "hf";
  // 4 query groups so that TP = 4 is valid (4 heads: plain multi-head attention in config.json, hence
  // --group_query_attention false --num_query_groups 4 over the demo preset); a short run makes the weights
  // non-trivial.
  ASSERT_EQ(run(checkpoint_job(run_dir, "--train_iters 10 --num_query_groups 4"), "train").exit_code, 0);
  ASSERT_EQ(run({"export", "--to_hf", "--load", run_dir.string(), "--output_dir", hf.string()}, "to_hf").exit_code, 0);

  const double l1 = first_loss(hf, "tp1", "", 1, "with 56 dummy tokens (new size: 1080)");
  const double l2 =
      first_loss(hf, "tp2", "--tensor_model_parallel_size 2", 2, "with 176 dummy tokens (new size: 1200)");
  const double l4 =
      first_loss(hf, "tp4", "--tensor_model_parallel_size 4", 4, "with 416 dummy tokens (new size: 1440)");
  EXPECT_LE(std::abs(l2 - l1) / l1, 1e-5) << "TP=1 " << l1 << " vs TP=2 " << l2;
  EXPECT_LE(std::abs(l4 - l1) / l1, 1e-5) << "TP=1 " << l1 << " vs TP=4 " << l4;

  // Megatron's behaviour on request: the padded logits join the softmax, and
  // the more of them, the higher the loss (so the padding above was real).
  const double m1 = first_loss(hf, "m1", "--mask_padded_vocab false", 1, "(new size: 1080)");
  const double m4 =
      first_loss(hf, "m4", "--mask_padded_vocab false --tensor_model_parallel_size 4", 4, "(new size: 1440)");
  std::printf("iteration-1 loss: masked TP=1 %.17g TP=2 %.17g TP=4 %.17g; Megatron TP=1 %.17g TP=4 %.17g\n", l1, l2, l4,
              m1, m4);
  EXPECT_GT(m1, l1 + 1e-3) << "56 padded logits in the softmax";
  EXPECT_GT(m4, m1 + 1e-3) << "416 padded logits in the softmax";
}

}  // namespace
}  // namespace mtrain::functional
